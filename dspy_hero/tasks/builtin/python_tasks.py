'''The built-in Python task: 30 small function-writing tasks with unittest tests (BigCodeBench style).

Each task has a natural-language description, a ``code_prompt`` (imports, signature and a docstring
with an example), the ``entry_point`` name and ``test_code`` defining ``class TestCases``. The test
code runs after the candidate code in one sandboxed process (`PythonSandbox.run_unittest`), so it
calls the function by name. Tasks are everyday work: parsing, dates, aggregation, small algorithms.

Reference solutions are kept apart in `python_reference` (for tests and demos only; LMs never see
them). Split: a seeded order of task ids, the last `test_fraction` held out (no groups here).
'''

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import dspy

from dspy_hero.tasks.base import Task
from dspy_hero.tasks.splits import split_by_fraction

INPUTS = ("prompt",)
# Environment references are inputs too, so dspy.Evaluate hands them to HERO-T; the program
# itself shows the LM only INPUTS (see dspy_hero.metrics.base).
ENV_INPUTS = ("code_prompt", "entry_point")


@dataclass(frozen=True)
class PyTask:
    entry_point: str
    description: str
    code_prompt: str
    tests: str  # the body of class TestCases

    @property
    def test_code(self) -> str:
        return "import unittest\n\n\nclass TestCases(unittest.TestCase):\n" + textwrap.indent(
            textwrap.dedent(self.tests).strip("\n"), "    "
        ) + "\n"

    @property
    def prompt(self) -> str:
        return f"{self.description}\n\n{self.code_prompt.rstrip()}\n"


def _t(entry_point: str, description: str, code_prompt: str, tests: str) -> PyTask:
    return PyTask(entry_point, " ".join(description.split()), textwrap.dedent(code_prompt).strip("\n") + "\n", tests)


TASKS: tuple[PyTask, ...] = (
    _t("parse_duration",
       "Parse a duration string made of hours, minutes and seconds parts such as '1h30m' or '45s' into a total "
       "number of seconds. Parts appear in the order h, m, s, each at most once, each optional but at least one "
       "present. Raise ValueError for anything else (empty string, unknown unit, wrong order, spaces).",
       '''
       def parse_duration(text: str) -> int:
           """Total seconds in a duration like '1h30m15s'.

           >>> parse_duration("1h30m15s")
           5415
           """
       ''',
       '''
       def test_full(self):
           self.assertEqual(parse_duration("1h30m15s"), 5415)

       def test_single_parts(self):
           self.assertEqual(parse_duration("45s"), 45)
           self.assertEqual(parse_duration("2h"), 7200)
           self.assertEqual(parse_duration("10m"), 600)

       def test_skip_middle(self):
           self.assertEqual(parse_duration("1h5s"), 3605)

       def test_invalid(self):
           for bad in ["", "5x", "10s5m", "1h 30m", "h", "1h1h"]:
               with self.assertRaises(ValueError):
                   parse_duration(bad)
       '''),
    _t("word_frequencies",
       "Count word frequencies in a text. Words are runs of letters, digits or apostrophes, compared "
       "case-insensitively (report them lowercase). Return the `top_n` most frequent as (word, count) pairs, "
       "sorted by count descending and then alphabetically.",
       '''
       def word_frequencies(text: str, top_n: int) -> list[tuple[str, int]]:
           """Most frequent words with counts.

           >>> word_frequencies("The cat and the hat.", 2)
           [('the', 2), ('and', 1)]
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(word_frequencies("The cat and the hat.", 2), [("the", 2), ("and", 1)])

       def test_ties_alphabetical(self):
           self.assertEqual(word_frequencies("b a c b a", 3), [("a", 2), ("b", 2), ("c", 1)])

       def test_apostrophes_and_punctuation(self):
           text = "Don't stop! don't, STOP... won't."
           self.assertEqual(word_frequencies(text, 2), [("don't", 2), ("stop", 2)])

       def test_top_n_larger_than_vocabulary(self):
           self.assertEqual(word_frequencies("one two", 5), [("one", 1), ("two", 1)])

       def test_empty(self):
           self.assertEqual(word_frequencies("...", 3), [])
       '''),
    _t("business_days_between",
       "Count the business days (Monday to Friday) from `start` inclusive to `end` exclusive, both ISO dates "
       "(YYYY-MM-DD). Return 0 when end is not after start.",
       '''
       def business_days_between(start: str, end: str) -> int:
           """Weekdays in [start, end).

           >>> business_days_between("2024-03-04", "2024-03-11")
           5
           """
       ''',
       '''
       def test_one_week(self):
           self.assertEqual(business_days_between("2024-03-04", "2024-03-11"), 5)

       def test_weekend_only(self):
           self.assertEqual(business_days_between("2024-03-09", "2024-03-11"), 0)

       def test_partial_weeks(self):
           self.assertEqual(business_days_between("2024-02-28", "2024-03-05"), 4)

       def test_long_range(self):
           self.assertEqual(business_days_between("2024-01-01", "2025-01-01"), 262)

       def test_reversed(self):
           self.assertEqual(business_days_between("2024-03-11", "2024-03-04"), 0)
       '''),
    _t("group_totals",
       "Sum a numeric field of a list of records grouped by another field. Records missing the group key are "
       "skipped; a missing value counts as 0. Return a dict from group to total, with keys in order of first "
       "appearance.",
       '''
       def group_totals(records: list[dict], key: str, value: str) -> dict:
           """Totals of records[value] grouped by records[key].

           >>> group_totals([{"city": "Oslo", "amount": 3}, {"city": "Oslo", "amount": 2}], "city", "amount")
           {'Oslo': 5}
           """
       ''',
       '''
       def test_grouping(self):
           rows = [{"c": "a", "v": 1}, {"c": "b", "v": 2.5}, {"c": "a", "v": 4}]
           self.assertEqual(group_totals(rows, "c", "v"), {"a": 5, "b": 2.5})

       def test_order_of_first_appearance(self):
           rows = [{"c": "z", "v": 1}, {"c": "a", "v": 1}, {"c": "z", "v": 1}]
           self.assertEqual(list(group_totals(rows, "c", "v")), ["z", "a"])

       def test_missing_fields(self):
           rows = [{"c": "a"}, {"v": 10}, {"c": "a", "v": 2}]
           self.assertEqual(group_totals(rows, "c", "v"), {"a": 2})

       def test_empty(self):
           self.assertEqual(group_totals([], "c", "v"), {})
       '''),
    _t("is_valid_isbn10",
       "Check an ISBN-10. Hyphens are ignored; the remaining 10 characters are digits except that the last may "
       "be 'X' (value 10). Valid when sum of (position * digit) for positions 1..10 is divisible by 11.",
       '''
       def is_valid_isbn10(isbn: str) -> bool:
           """ISBN-10 checksum test.

           >>> is_valid_isbn10("0-306-40615-2")
           True
           """
       ''',
       '''
       def test_valid(self):
           self.assertIs(is_valid_isbn10("0-306-40615-2"), True)
           self.assertIs(is_valid_isbn10("080442957X"), True)

       def test_bad_checksum(self):
           self.assertIs(is_valid_isbn10("0-306-40615-3"), False)

       def test_bad_format(self):
           self.assertIs(is_valid_isbn10("X804429570"), False)
           self.assertIs(is_valid_isbn10("12345"), False)
           self.assertIs(is_valid_isbn10("03064061A2"), False)
       '''),
    _t("run_length_encode",
       "Run-length encode a string: each maximal run of one character becomes the character followed by the "
       "run length.",
       '''
       def run_length_encode(text: str) -> str:
           """Run-length encoding.

           >>> run_length_encode("aaabbc")
           'a3b2c1'
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(run_length_encode("aaabbc"), "a3b2c1")

       def test_long_runs(self):
           self.assertEqual(run_length_encode("x" * 12 + "y"), "x12y1")

       def test_repeated_groups(self):
           self.assertEqual(run_length_encode("aabaa"), "a2b1a2")

       def test_empty(self):
           self.assertEqual(run_length_encode(""), "")
       '''),
    _t("merge_intervals",
       "Merge overlapping or touching closed intervals given as (start, end) pairs in any order. Return the "
       "merged intervals sorted by start, as tuples.",
       '''
       def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
           """Merged, sorted intervals.

           >>> merge_intervals([(5, 8), (1, 3), (2, 4)])
           [(1, 4), (5, 8)]
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(merge_intervals([(5, 8), (1, 3), (2, 4)]), [(1, 4), (5, 8)])

       def test_touching(self):
           self.assertEqual(merge_intervals([(1, 2), (2, 3)]), [(1, 3)])

       def test_nested(self):
           self.assertEqual(merge_intervals([(1, 10), (2, 3), (4, 5)]), [(1, 10)])

       def test_empty_and_single(self):
           self.assertEqual(merge_intervals([]), [])
           self.assertEqual(merge_intervals([(7, 9)]), [(7, 9)])
       '''),
    _t("roman_to_int",
       "Convert a Roman numeral (I, V, X, L, C, D, M with subtractive pairs such as IV and CM) to an integer.",
       '''
       def roman_to_int(numeral: str) -> int:
           """Value of a Roman numeral.

           >>> roman_to_int("MCMXCIV")
           1994
           """
       ''',
       '''
       def test_examples(self):
           self.assertEqual(roman_to_int("MCMXCIV"), 1994)
           self.assertEqual(roman_to_int("III"), 3)
           self.assertEqual(roman_to_int("LVIII"), 58)

       def test_subtractive(self):
           self.assertEqual(roman_to_int("IX"), 9)
           self.assertEqual(roman_to_int("XL"), 40)
           self.assertEqual(roman_to_int("CD"), 400)

       def test_large(self):
           self.assertEqual(roman_to_int("MMMCMXCIX"), 3999)
       '''),
    _t("parse_csv_line",
       "Split one CSV line into fields. Fields are separated by commas; a field may be wrapped in double quotes, "
       "in which case it may contain commas, and a doubled quote inside it stands for one quote. Do not use the "
       "csv module.",
       '''
       def parse_csv_line(line: str) -> list[str]:
           """Fields of one CSV line.

           >>> parse_csv_line('a,"b,c",d')
           ['a', 'b,c', 'd']
           """
       ''',
       '''
       def test_plain(self):
           self.assertEqual(parse_csv_line("x,y,z"), ["x", "y", "z"])

       def test_quoted_comma(self):
           self.assertEqual(parse_csv_line('a,"b,c",d'), ["a", "b,c", "d"])

       def test_escaped_quote(self):
           self.assertEqual(parse_csv_line('"say ""hi""",2'), ['say "hi"', "2"])

       def test_empty_fields(self):
           self.assertEqual(parse_csv_line(",a,,"), ["", "a", "", ""])

       def test_quoted_empty_and_spaces(self):
           self.assertEqual(parse_csv_line('"",b, c '), ["", "b", " c "])
       '''),
    _t("flatten_dict",
       "Flatten a nested dictionary: nested keys are joined with `sep`. Only dict values are descended into; "
       "an empty nested dict disappears.",
       '''
       def flatten_dict(data: dict, sep: str = ".") -> dict:
           """Flattened copy of a nested dict.

           >>> flatten_dict({"a": {"b": 1, "c": {"d": 2}}, "e": 3})
           {'a.b': 1, 'a.c.d': 2, 'e': 3}
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(flatten_dict({"a": {"b": 1, "c": {"d": 2}}, "e": 3}), {"a.b": 1, "a.c.d": 2, "e": 3})

       def test_separator(self):
           self.assertEqual(flatten_dict({"x": {"y": 1}}, sep="/"), {"x/y": 1})

       def test_lists_are_values(self):
           self.assertEqual(flatten_dict({"x": [1, {"y": 2}]}), {"x": [1, {"y": 2}]})

       def test_empty_nested(self):
           self.assertEqual(flatten_dict({"a": {}, "b": 1}), {"b": 1})

       def test_input_unchanged(self):
           data = {"a": {"b": 1}}
           flatten_dict(data)
           self.assertEqual(data, {"a": {"b": 1}})
       '''),
    _t("age_on",
       "Compute a person's age in whole years on a given date, from ISO dates. Someone born on 29 February "
       "turns a year older on 1 March in non-leap years.",
       '''
       def age_on(birth_date: str, on_date: str) -> int:
           """Completed years between two ISO dates.

           >>> age_on("1990-06-15", "2024-06-14")
           33
           """
       ''',
       '''
       def test_before_and_on_birthday(self):
           self.assertEqual(age_on("1990-06-15", "2024-06-14"), 33)
           self.assertEqual(age_on("1990-06-15", "2024-06-15"), 34)

       def test_leap_day(self):
           self.assertEqual(age_on("2000-02-29", "2023-02-28"), 22)
           self.assertEqual(age_on("2000-02-29", "2023-03-01"), 23)
           self.assertEqual(age_on("2000-02-29", "2024-02-29"), 24)

       def test_newborn(self):
           self.assertEqual(age_on("2024-01-01", "2024-12-31"), 0)
       '''),
    _t("moving_average",
       "Return the simple moving averages of `values` over windows of `window` consecutive items (one average "
       "per full window). Raise ValueError if window is less than 1 or larger than the number of values.",
       '''
       def moving_average(values: list[float], window: int) -> list[float]:
           """Simple moving average.

           >>> moving_average([1, 2, 3, 4], 2)
           [1.5, 2.5, 3.5]
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(moving_average([1, 2, 3, 4], 2), [1.5, 2.5, 3.5])

       def test_full_window(self):
           self.assertEqual(moving_average([2, 4, 9], 3), [5.0])

       def test_window_one(self):
           self.assertEqual(moving_average([3, 1], 1), [3.0, 1.0])

       def test_floats(self):
           for got, want in zip(moving_average([0.1, 0.2, 0.3, 0.4], 3), [0.2, 0.3]):
               self.assertAlmostEqual(got, want)

       def test_invalid(self):
           with self.assertRaises(ValueError):
               moving_average([1, 2], 3)
           with self.assertRaises(ValueError):
               moving_average([1, 2], 0)
       '''),
    _t("slugify",
       "Turn a title into a URL slug: strip accents (Unicode NFKD, drop non-ASCII), lowercase, replace every run "
       "of characters that are not letters or digits with one hyphen, and trim hyphens from both ends.",
       '''
       def slugify(title: str) -> str:
           """URL slug for a title.

           >>> slugify("Hello, World!")
           'hello-world'
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(slugify("Hello, World!"), "hello-world")

       def test_accents(self):
           self.assertEqual(slugify("Crème Brûlée Recipe"), "creme-brulee-recipe")

       def test_runs_and_edges(self):
           self.assertEqual(slugify("  --Top 10:  Python   Tips--  "), "top-10-python-tips")

       def test_empty(self):
           self.assertEqual(slugify("!!!"), "")
       '''),
    _t("top_k_by_value",
       "Return the keys of the `k` largest values of a dict, largest first; equal values are ordered by key "
       "ascending.",
       '''
       def top_k_by_value(scores: dict, k: int) -> list:
           """Keys of the k largest values.

           >>> top_k_by_value({"a": 3, "b": 5, "c": 1}, 2)
           ['b', 'a']
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(top_k_by_value({"a": 3, "b": 5, "c": 1}, 2), ["b", "a"])

       def test_ties(self):
           self.assertEqual(top_k_by_value({"y": 2, "x": 2, "z": 2, "w": 1}, 3), ["x", "y", "z"])

       def test_k_too_large(self):
           self.assertEqual(top_k_by_value({"a": 1}, 4), ["a"])

       def test_zero(self):
           self.assertEqual(top_k_by_value({"a": 1}, 0), [])
       '''),
    _t("balanced_brackets",
       "Decide whether the brackets (), [] and {} in a string are balanced and properly nested; other "
       "characters are ignored.",
       '''
       def balanced_brackets(text: str) -> bool:
           """True when all brackets match.

           >>> balanced_brackets("f(a[1], {b: 2})")
           True
           """
       ''',
       '''
       def test_balanced(self):
           self.assertIs(balanced_brackets("f(a[1], {b: 2})"), True)
           self.assertIs(balanced_brackets(""), True)

       def test_wrong_nesting(self):
           self.assertIs(balanced_brackets("([)]"), False)

       def test_unclosed_and_extra(self):
           self.assertIs(balanced_brackets("(("), False)
           self.assertIs(balanced_brackets("())"), False)
           self.assertIs(balanced_brackets("}"), False)
       '''),
    _t("camel_to_snake",
       "Convert a CamelCase or camelCase identifier to snake_case. A run of capitals is treated as one word "
       "(an acronym), except that its last capital starts the next word when followed by a lowercase letter. "
       "Digits stay attached to the preceding word.",
       '''
       def camel_to_snake(name: str) -> str:
           """snake_case version of an identifier.

           >>> camel_to_snake("HTTPServerError")
           'http_server_error'
           """
       ''',
       '''
       def test_acronym(self):
           self.assertEqual(camel_to_snake("HTTPServerError"), "http_server_error")

       def test_simple(self):
           self.assertEqual(camel_to_snake("userId"), "user_id")
           self.assertEqual(camel_to_snake("MyClass"), "my_class")

       def test_digits(self):
           self.assertEqual(camel_to_snake("parseV2Response"), "parse_v2_response")

       def test_already_lower(self):
           self.assertEqual(camel_to_snake("simple"), "simple")
       '''),
    _t("chunk_list",
       "Split a list into consecutive chunks of `size` items; the last chunk may be shorter. Raise ValueError if "
       "size is less than 1.",
       '''
       def chunk_list(items: list, size: int) -> list[list]:
           """Consecutive chunks.

           >>> chunk_list([1, 2, 3, 4, 5], 2)
           [[1, 2], [3, 4], [5]]
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(chunk_list([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]])

       def test_exact(self):
           self.assertEqual(chunk_list(list("abcdef"), 3), [["a", "b", "c"], ["d", "e", "f"]])

       def test_empty(self):
           self.assertEqual(chunk_list([], 4), [])

       def test_invalid(self):
           with self.assertRaises(ValueError):
               chunk_list([1], 0)
       '''),
    _t("parse_query_string",
       "Parse a URL query string into a dict from name to the list of its values, in order of appearance. "
       "Decode percent escapes and '+' as space in names and values; a name without '=' has the value ''. "
       "Empty pieces (from '&&') are skipped.",
       '''
       def parse_query_string(query: str) -> dict[str, list[str]]:
           """Parsed query string.

           >>> parse_query_string("a=1&b=2&a=3")
           {'a': ['1', '3'], 'b': ['2']}
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(parse_query_string("a=1&b=2&a=3"), {"a": ["1", "3"], "b": ["2"]})

       def test_decoding(self):
           self.assertEqual(parse_query_string("q=hello+world&city=S%C3%A3o%20Paulo"),
                            {"q": ["hello world"], "city": ["São Paulo"]})

       def test_flags_and_empty_pieces(self):
           self.assertEqual(parse_query_string("debug&&x="), {"debug": [""], "x": [""]})

       def test_empty(self):
           self.assertEqual(parse_query_string(""), {})
       '''),
    _t("month_end",
       "Return the last day of the month of an ISO date, as an ISO date string.",
       '''
       def month_end(day: str) -> str:
           """Last day of the month.

           >>> month_end("2024-02-10")
           '2024-02-29'
           """
       ''',
       '''
       def test_leap_february(self):
           self.assertEqual(month_end("2024-02-10"), "2024-02-29")

       def test_common_february(self):
           self.assertEqual(month_end("2023-02-01"), "2023-02-28")

       def test_december_and_30_day_month(self):
           self.assertEqual(month_end("2023-12-31"), "2023-12-31")
           self.assertEqual(month_end("2023-04-15"), "2023-04-30")
       '''),
    _t("invert_mapping",
       "Invert a mapping from a key to a list of values into a mapping from each value to the sorted list of keys "
       "that contain it. The result's keys are sorted too.",
       '''
       def invert_mapping(mapping: dict[str, list[str]]) -> dict[str, list[str]]:
           """Value -> sorted keys.

           >>> invert_mapping({"alice": ["sql", "python"], "bob": ["python"]})
           {'python': ['alice', 'bob'], 'sql': ['alice']}
           """
       ''',
       '''
       def test_example(self):
           got = invert_mapping({"alice": ["sql", "python"], "bob": ["python"]})
           self.assertEqual(got, {"python": ["alice", "bob"], "sql": ["alice"]})
           self.assertEqual(list(got), ["python", "sql"])

       def test_duplicates_in_a_list(self):
           self.assertEqual(invert_mapping({"k": ["v", "v"]}), {"v": ["k"]})

       def test_empty(self):
           self.assertEqual(invert_mapping({"k": []}), {})
       '''),
    _t("levenshtein",
       "Compute the Levenshtein edit distance (insertions, deletions, substitutions, each cost 1) between two "
       "strings.",
       '''
       def levenshtein(a: str, b: str) -> int:
           """Edit distance.

           >>> levenshtein("kitten", "sitting")
           3
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(levenshtein("kitten", "sitting"), 3)

       def test_empty(self):
           self.assertEqual(levenshtein("", "abc"), 3)
           self.assertEqual(levenshtein("abc", ""), 3)
           self.assertEqual(levenshtein("", ""), 0)

       def test_symmetry_and_identity(self):
           self.assertEqual(levenshtein("flaw", "lawn"), 2)
           self.assertEqual(levenshtein("lawn", "flaw"), 2)
           self.assertEqual(levenshtein("same", "same"), 0)
       '''),
    _t("format_bytes",
       "Format a byte count for humans with binary units. Below 1024 use whole bytes ('512 B'); otherwise divide "
       "by 1024 until the value is below 1024 (units KiB, MiB, GiB, TiB; stop at TiB) and show one decimal.",
       '''
       def format_bytes(n: int) -> str:
           """Human-readable size.

           >>> format_bytes(1536)
           '1.5 KiB'
           """
       ''',
       '''
       def test_bytes(self):
           self.assertEqual(format_bytes(0), "0 B")
           self.assertEqual(format_bytes(1023), "1023 B")

       def test_units(self):
           self.assertEqual(format_bytes(1536), "1.5 KiB")
           self.assertEqual(format_bytes(1024 ** 2 * 3), "3.0 MiB")
           self.assertEqual(format_bytes(int(1024 ** 3 * 2.3)), "2.3 GiB")

       def test_caps_at_tib(self):
           self.assertEqual(format_bytes(1024 ** 5), "1024.0 TiB")
       '''),
    _t("most_common_domain",
       "Given email addresses, return the most common domain (the part after '@', lowercased). Ties go to the "
       "alphabetically first domain. Raise ValueError when there are no valid addresses (exactly one '@' with "
       "text on both sides); invalid addresses are ignored.",
       '''
       def most_common_domain(emails: list[str]) -> str:
           """Most frequent email domain.

           >>> most_common_domain(["a@x.com", "b@Y.org", "c@X.com"])
           'x.com'
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(most_common_domain(["a@x.com", "b@Y.org", "c@X.com"]), "x.com")

       def test_tie(self):
           self.assertEqual(most_common_domain(["a@b.io", "c@a.io"]), "a.io")

       def test_invalid_ignored(self):
           self.assertEqual(most_common_domain(["bad", "@x.com", "a@@z.com", "q@y.net"]), "y.net")

       def test_none_valid(self):
           with self.assertRaises(ValueError):
               most_common_domain(["nope", "a@"])
       '''),
    _t("password_problems",
       "Check a password against a policy and return the list of violated rules, in this order, using exactly "
       "these strings: 'too short' (fewer than 8 characters), 'no uppercase', 'no lowercase', 'no digit', "
       "'contains space'. An acceptable password gives an empty list.",
       '''
       def password_problems(password: str) -> list[str]:
           """Violated password rules.

           >>> password_problems("abc")
           ['too short', 'no uppercase', 'no digit']
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(password_problems("abc"), ["too short", "no uppercase", "no digit"])

       def test_ok(self):
           self.assertEqual(password_problems("Tr0ub4dor"), [])

       def test_space(self):
           self.assertEqual(password_problems("Pass word 1"), ["contains space"])

       def test_all(self):
           self.assertEqual(password_problems(" "), ["too short", "no uppercase", "no lowercase", "no digit",
                                                     "contains space"])
       '''),
    _t("weekday_histogram",
       "Count how many of the given ISO dates fall on each weekday. Return a dict with all seven English weekday "
       "names as keys, Monday first, including days with a count of 0.",
       '''
       def weekday_histogram(dates: list[str]) -> dict[str, int]:
           """Dates per weekday, Monday..Sunday.

           >>> weekday_histogram(["2024-03-04"])["Monday"]
           1
           """
       ''',
       '''
       def test_counts(self):
           got = weekday_histogram(["2024-03-04", "2024-03-11", "2024-03-09"])
           self.assertEqual(got["Monday"], 2)
           self.assertEqual(got["Saturday"], 1)
           self.assertEqual(got["Sunday"], 0)

       def test_key_order(self):
           self.assertEqual(list(weekday_histogram([])),
                            ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"])

       def test_total(self):
           days = [f"2024-01-{d:02d}" for d in range(1, 32)]
           self.assertEqual(sum(weekday_histogram(days).values()), 31)
           self.assertEqual(weekday_histogram(days)["Monday"], 5)
       '''),
    _t("binary_search_first",
       "Find the index of the first occurrence of `target` in a sorted list using binary search; return -1 if it "
       "is absent.",
       '''
       def binary_search_first(items: list[int], target: int) -> int:
           """Index of the first occurrence, or -1.

           >>> binary_search_first([1, 2, 2, 2, 5], 2)
           1
           """
       ''',
       '''
       def test_duplicates(self):
           self.assertEqual(binary_search_first([1, 2, 2, 2, 5], 2), 1)
           self.assertEqual(binary_search_first([7, 7, 7], 7), 0)

       def test_absent(self):
           self.assertEqual(binary_search_first([1, 3, 5], 4), -1)
           self.assertEqual(binary_search_first([], 1), -1)

       def test_ends(self):
           self.assertEqual(binary_search_first([1, 3, 5], 5), 2)
           self.assertEqual(binary_search_first(list(range(1000)), 0), 0)
       '''),
    _t("transpose",
       "Transpose a matrix given as a list of rows. Raise ValueError if the rows have different lengths. The "
       "transpose of an empty matrix is an empty list.",
       '''
       def transpose(matrix: list[list]) -> list[list]:
           """Rows become columns.

           >>> transpose([[1, 2, 3], [4, 5, 6]])
           [[1, 4], [2, 5], [3, 6]]
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(transpose([[1, 2, 3], [4, 5, 6]]), [[1, 4], [2, 5], [3, 6]])

       def test_lists_not_tuples(self):
           self.assertIsInstance(transpose([[1]])[0], list)

       def test_empty(self):
           self.assertEqual(transpose([]), [])

       def test_ragged(self):
           with self.assertRaises(ValueError):
               transpose([[1, 2], [3]])
       '''),
    _t("count_log_levels",
       "Count log lines per level. A line looks like '2024-05-01 12:00:03 [ERROR] message'; the level is the "
       "uppercase word inside the first square brackets. Lines without a level are counted under 'UNKNOWN'. "
       "Return a dict with levels sorted alphabetically.",
       '''
       def count_log_levels(lines: list[str]) -> dict[str, int]:
           """Lines per log level.

           >>> count_log_levels(["2024-05-01 12:00:03 [ERROR] disk full"])
           {'ERROR': 1}
           """
       ''',
       '''
       def test_counts(self):
           lines = ["t [INFO] a", "t [ERROR] b", "t [INFO] c [WARN] d"]
           self.assertEqual(count_log_levels(lines), {"ERROR": 1, "INFO": 2})

       def test_unknown(self):
           self.assertEqual(count_log_levels(["no level here", "t [DEBUG] x"]), {"DEBUG": 1, "UNKNOWN": 1})

       def test_sorted_keys(self):
           self.assertEqual(list(count_log_levels(["[WARN] a", "[ERROR] b", "[DEBUG] c"])), ["DEBUG", "ERROR", "WARN"])
       '''),
    _t("compound_interest",
       "Return the balance after `years` of compound interest on `principal` at `annual_rate` (0.05 means 5%), "
       "compounded `periods_per_year` times a year, rounded to 2 decimals. Raise ValueError for negative "
       "principal, years or rate, or periods_per_year < 1.",
       '''
       def compound_interest(principal: float, annual_rate: float, years: float, periods_per_year: int = 12) -> float:
           """Final balance, rounded to cents.

           >>> compound_interest(1000, 0.05, 10)
           1647.01
           """
       ''',
       '''
       def test_monthly(self):
           self.assertEqual(compound_interest(1000, 0.05, 10), 1647.01)

       def test_yearly(self):
           self.assertEqual(compound_interest(2500, 0.04, 3, periods_per_year=1), 2812.16)

       def test_zero_rate(self):
           self.assertEqual(compound_interest(100, 0.0, 5), 100.0)

       def test_invalid(self):
           for args in [(-1, 0.1, 1), (1, -0.1, 1), (1, 0.1, -1)]:
               with self.assertRaises(ValueError):
                   compound_interest(*args)
           with self.assertRaises(ValueError):
               compound_interest(1, 0.1, 1, periods_per_year=0)
       '''),
    _t("dedupe",
       "Remove duplicates from a list while keeping the first occurrence of each, in order. If `key` is given, two "
       "items are duplicates when key(item) is equal.",
       '''
       def dedupe(items: list, key=None) -> list:
           """First occurrences, in order.

           >>> dedupe([3, 1, 3, 2, 1])
           [3, 1, 2]
           """
       ''',
       '''
       def test_example(self):
           self.assertEqual(dedupe([3, 1, 3, 2, 1]), [3, 1, 2])

       def test_key(self):
           self.assertEqual(dedupe(["Apple", "apple", "Banana"], key=str.lower), ["Apple", "Banana"])

       def test_unhashable_items_with_key(self):
           rows = [{"id": 1, "v": "a"}, {"id": 1, "v": "b"}, {"id": 2, "v": "c"}]
           self.assertEqual(dedupe(rows, key=lambda r: r["id"]), [{"id": 1, "v": "a"}, {"id": 2, "v": "c"}])

       def test_empty(self):
           self.assertEqual(dedupe([]), [])
       '''),
)


def python_examples() -> list[dspy.Example]:
    """All built-in Python examples in the order of `TASKS`."""
    return [
        dspy.Example(
            example_id=f"py-{i:02d}-{task.entry_point}",
            prompt=task.prompt,
            code_prompt=task.code_prompt,
            entry_point=task.entry_point,
            test_code=task.test_code,
        ).with_inputs(*INPUTS, *ENV_INPUTS)
        for i, task in enumerate(TASKS, 1)
    ]


def builtin_python_task(split_seed: int = 0, test_fraction: float = 1 / 3, **_: object) -> Task:
    """The built-in Python Task (unittest pass/fail through the sandbox)."""
    from dspy_hero.metrics.python import python_tests_metric
    from dspy_hero.tasks.builtin.task_builder import make_task

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    examples = python_examples()
    train, test = split_by_fraction(examples, 1.0 - test_fraction, seed=split_seed)
    note = (
        f"builtin-python: {len(examples)} function tasks with unittest tests; a seeded order of task ids "
        f"(seed {split_seed}) holds out {len(test)} for test, {len(train)} train. Semantics: all tests pass "
        "(BigCodeBench-style pass@1)."
    )
    return make_task(
        name="builtin-python", language="python", train=train, test=test, metric=python_tests_metric(),
        inputs=INPUTS, group_key=None, split_note=note,
    )
