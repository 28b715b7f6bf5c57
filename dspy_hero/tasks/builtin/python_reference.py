'''Reference solutions for the built-in Python tasks, as source text run through the sandbox.

Only tests and demos import this module (to prove every task is solvable and its tests meaningful, and
to give scripted LMs a correct answer). Task loaders never read it, so no LM prompt can contain it.
'''

from __future__ import annotations

import textwrap

_SOURCES: dict[str, str] = {
    "parse_duration": '''
        import re

        def parse_duration(text: str) -> int:
            match = re.fullmatch(r"(?:(\\d+)h)?(?:(\\d+)m)?(?:(\\d+)s)?", text)
            if not text or match is None:
                raise ValueError(f"invalid duration: {text!r}")
            hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
            return hours * 3600 + minutes * 60 + seconds
    ''',
    "word_frequencies": '''
        import re
        from collections import Counter

        def word_frequencies(text: str, top_n: int) -> list[tuple[str, int]]:
            counts = Counter(w.lower() for w in re.findall(r"[A-Za-z0-9']+", text))
            return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top_n]
    ''',
    "business_days_between": '''
        from datetime import date, timedelta

        def business_days_between(start: str, end: str) -> int:
            day, stop = date.fromisoformat(start), date.fromisoformat(end)
            count = 0
            while day < stop:
                count += day.weekday() < 5
                day += timedelta(days=1)
            return count
    ''',
    "group_totals": '''
        def group_totals(records: list[dict], key: str, value: str) -> dict:
            totals = {}
            for record in records:
                if key in record:
                    totals[record[key]] = totals.get(record[key], 0) + record.get(value, 0)
            return totals
    ''',
    "is_valid_isbn10": '''
        def is_valid_isbn10(isbn: str) -> bool:
            chars = isbn.replace("-", "")
            if len(chars) != 10 or not chars[:9].isdigit() or not (chars[9].isdigit() or chars[9] == "X"):
                return False
            values = [int(c) for c in chars[:9]] + [10 if chars[9] == "X" else int(chars[9])]
            return sum(i * v for i, v in enumerate(values, 1)) % 11 == 0
    ''',
    "run_length_encode": '''
        from itertools import groupby

        def run_length_encode(text: str) -> str:
            return "".join(f"{ch}{len(list(run))}" for ch, run in groupby(text))
    ''',
    "merge_intervals": '''
        def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
            merged = []
            for start, end in sorted(intervals):
                if merged and start <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], end))
                else:
                    merged.append((start, end))
            return merged
    ''',
    "roman_to_int": '''
        def roman_to_int(numeral: str) -> int:
            values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
            total = 0
            for i, ch in enumerate(numeral):
                v = values[ch]
                total += -v if i + 1 < len(numeral) and values[numeral[i + 1]] > v else v
            return total
    ''',
    "parse_csv_line": '''
        def parse_csv_line(line: str) -> list[str]:
            fields, current, quoted, i = [], [], False, 0
            while i < len(line):
                ch = line[i]
                if quoted:
                    if ch == '"' and i + 1 < len(line) and line[i + 1] == '"':
                        current.append('"')
                        i += 1
                    elif ch == '"':
                        quoted = False
                    else:
                        current.append(ch)
                elif ch == '"':
                    quoted = True
                elif ch == ",":
                    fields.append("".join(current))
                    current = []
                else:
                    current.append(ch)
                i += 1
            fields.append("".join(current))
            return fields
    ''',
    "flatten_dict": '''
        def flatten_dict(data: dict, sep: str = ".") -> dict:
            out = {}
            for key, value in data.items():
                if isinstance(value, dict):
                    for sub, inner in flatten_dict(value, sep).items():
                        out[f"{key}{sep}{sub}"] = inner
                else:
                    out[key] = value
            return out
    ''',
    "age_on": '''
        from datetime import date

        def age_on(birth_date: str, on_date: str) -> int:
            born, day = date.fromisoformat(birth_date), date.fromisoformat(on_date)
            return day.year - born.year - ((day.month, day.day) < (born.month, born.day))
    ''',
    "moving_average": '''
        def moving_average(values: list[float], window: int) -> list[float]:
            if window < 1 or window > len(values):
                raise ValueError("window must be between 1 and len(values)")
            return [sum(values[i:i + window]) / window for i in range(len(values) - window + 1)]
    ''',
    "slugify": '''
        import re
        import unicodedata

        def slugify(title: str) -> str:
            ascii_text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
            return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    ''',
    "top_k_by_value": '''
        def top_k_by_value(scores: dict, k: int) -> list:
            return [key for key, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
    ''',
    "balanced_brackets": '''
        def balanced_brackets(text: str) -> bool:
            pairs, stack = {")": "(", "]": "[", "}": "{"}, []
            for ch in text:
                if ch in "([{":
                    stack.append(ch)
                elif ch in pairs:
                    if not stack or stack.pop() != pairs[ch]:
                        return False
            return not stack
    ''',
    "camel_to_snake": '''
        import re

        def camel_to_snake(name: str) -> str:
            words = re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+\\d*|[A-Z]+\\d*|\\d+", name)
            return "_".join(w.lower() for w in words)
    ''',
    "chunk_list": '''
        def chunk_list(items: list, size: int) -> list[list]:
            if size < 1:
                raise ValueError("size must be at least 1")
            return [items[i:i + size] for i in range(0, len(items), size)]
    ''',
    "parse_query_string": '''
        from urllib.parse import unquote_plus

        def parse_query_string(query: str) -> dict[str, list[str]]:
            out = {}
            for piece in query.split("&"):
                if not piece:
                    continue
                name, _, value = piece.partition("=")
                out.setdefault(unquote_plus(name), []).append(unquote_plus(value))
            return out
    ''',
    "month_end": '''
        import calendar
        from datetime import date

        def month_end(day: str) -> str:
            d = date.fromisoformat(day)
            return d.replace(day=calendar.monthrange(d.year, d.month)[1]).isoformat()
    ''',
    "invert_mapping": '''
        def invert_mapping(mapping: dict[str, list[str]]) -> dict[str, list[str]]:
            inverted = {}
            for key, values in mapping.items():
                for value in values:
                    inverted.setdefault(value, set()).add(key)
            return {value: sorted(keys) for value, keys in sorted(inverted.items())}
    ''',
    "levenshtein": '''
        def levenshtein(a: str, b: str) -> int:
            previous = list(range(len(b) + 1))
            for i, ca in enumerate(a, 1):
                current = [i]
                for j, cb in enumerate(b, 1):
                    current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
                previous = current
            return previous[-1]
    ''',
    "format_bytes": '''
        def format_bytes(n: int) -> str:
            if n < 1024:
                return f"{n} B"
            value = float(n)
            for unit in ("KiB", "MiB", "GiB", "TiB"):
                value /= 1024
                if value < 1024 or unit == "TiB":
                    return f"{value:.1f} {unit}"
    ''',
    "most_common_domain": '''
        from collections import Counter

        def most_common_domain(emails: list[str]) -> str:
            domains = Counter()
            for email in emails:
                local, at, domain = email.partition("@")
                if at and local and domain and "@" not in domain:
                    domains[domain.lower()] += 1
            if not domains:
                raise ValueError("no valid email addresses")
            return min(domains, key=lambda d: (-domains[d], d))
    ''',
    "password_problems": '''
        def password_problems(password: str) -> list[str]:
            checks = [
                ("too short", len(password) < 8),
                ("no uppercase", not any(c.isupper() for c in password)),
                ("no lowercase", not any(c.islower() for c in password)),
                ("no digit", not any(c.isdigit() for c in password)),
                ("contains space", " " in password),
            ]
            return [name for name, failed in checks if failed]
    ''',
    "weekday_histogram": '''
        from datetime import date

        DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

        def weekday_histogram(dates: list[str]) -> dict[str, int]:
            counts = dict.fromkeys(DAYS, 0)
            for d in dates:
                counts[DAYS[date.fromisoformat(d).weekday()]] += 1
            return counts
    ''',
    "binary_search_first": '''
        def binary_search_first(items: list[int], target: int) -> int:
            lo, hi = 0, len(items)
            while lo < hi:
                mid = (lo + hi) // 2
                if items[mid] < target:
                    lo = mid + 1
                else:
                    hi = mid
            return lo if lo < len(items) and items[lo] == target else -1
    ''',
    "transpose": '''
        def transpose(matrix: list[list]) -> list[list]:
            if any(len(row) != len(matrix[0]) for row in matrix):
                raise ValueError("ragged matrix")
            return [list(col) for col in zip(*matrix)]
    ''',
    "count_log_levels": '''
        import re

        def count_log_levels(lines: list[str]) -> dict[str, int]:
            counts = {}
            for line in lines:
                match = re.search(r"\\[([A-Z]+)\\]", line)
                level = match.group(1) if match else "UNKNOWN"
                counts[level] = counts.get(level, 0) + 1
            return dict(sorted(counts.items()))
    ''',
    "compound_interest": '''
        def compound_interest(principal: float, annual_rate: float, years: float, periods_per_year: int = 12) -> float:
            if principal < 0 or annual_rate < 0 or years < 0 or periods_per_year < 1:
                raise ValueError("invalid arguments")
            return round(principal * (1 + annual_rate / periods_per_year) ** (periods_per_year * years), 2)
    ''',
    "dedupe": '''
        def dedupe(items: list, key=None) -> list:
            seen, out = [], []
            for item in items:
                k = key(item) if key else item
                if k not in seen:
                    seen.append(k)
                    out.append(item)
            return out
    ''',
}

REFERENCE_SOLUTIONS: dict[str, str] = {name: textwrap.dedent(src).strip("\n") + "\n" for name, src in _SOURCES.items()}


def reference_solution(entry_point: str) -> str:
    return REFERENCE_SOLUTIONS[entry_point]
