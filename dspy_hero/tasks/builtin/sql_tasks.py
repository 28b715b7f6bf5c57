"""The built-in text-to-SQL task: 60 questions with gold SQL over the four generated databases.

Questions cover joins, aggregation, GROUP BY/HAVING, subqueries, ORDER BY/LIMIT, DISTINCT and date
filters, 15 per database. Domain terms are defined in the question itself (no evidence field), so the
program's inputs are just ``question`` and ``db_schema``.

Split (``split_note`` repeats it): within each database, questions are put in a seeded order and the
last ``test_fraction`` of them (a third by default) are held out. Test questions are therefore unseen
questions over the same four schemas. A split by database would leave one schema and ~15 questions
for testing, too few for a paired comparison; HERO-O still groups its own pools by ``db_id``.
"""

from __future__ import annotations

from pathlib import Path

import dspy

from dspy_hero.tasks.base import Task
from dspy_hero.tasks.builtin.sql_data import DATABASES, ensure_databases
from dspy_hero.tasks.splits import seeded_order

INPUTS = ("db_schema", "question")  # shared schema first: its KV is reused across questions
# Environment references are inputs too, so dspy.Evaluate hands them to HERO-T; the program
# itself shows the LM only INPUTS (see dspy_hero.metrics.base).
ENV_INPUTS = ("db_id", "db_path")

# (db_id, question, gold SQL). Ids are "<db_id>-<nn>" in this order; never reorder, only append.
QUESTIONS: tuple[tuple[str, str, str], ...] = (
    # --- music_store ---------------------------------------------------------------------------
    ("music_store", "How many tracks belong to the Jazz genre?",
     "SELECT COUNT(*) FROM tracks t JOIN genres g ON t.genre_id = g.genre_id WHERE g.name = 'Jazz'"),
    ("music_store", "List the names of the artists from the USA.",
     "SELECT name FROM artists WHERE country = 'USA'"),
    ("music_store", "Which 5 customers have spent the most in total across all their invoices? Give first name, "
     "last name and the total amount, highest first.",
     "SELECT c.first_name, c.last_name, SUM(i.total) AS spent FROM customers c JOIN invoices i "
     "ON c.customer_id = i.customer_id GROUP BY c.customer_id ORDER BY spent DESC LIMIT 5"),
    ("music_store", "For each genre, how many tracks does it have? Show the genre name and the number of tracks, "
     "from the largest genre to the smallest.",
     "SELECT g.name, COUNT(t.track_id) AS n FROM genres g JOIN tracks t ON t.genre_id = g.genre_id "
     "GROUP BY g.genre_id ORDER BY n DESC"),
    ("music_store", "What is the average track length in minutes for each album by Iron Cathedral? Show the "
     "album title and the average.",
     "SELECT al.title, AVG(t.milliseconds) / 60000.0 FROM albums al JOIN artists ar ON al.artist_id = ar.artist_id "
     "JOIN tracks t ON t.album_id = al.album_id WHERE ar.name = 'Iron Cathedral' GROUP BY al.album_id"),
    ("music_store", "Which artists have released more than 2 albums? Give the artist names.",
     "SELECT ar.name FROM artists ar JOIN albums al ON al.artist_id = ar.artist_id GROUP BY ar.artist_id "
     "HAVING COUNT(*) > 2"),
    ("music_store", "What was the total invoiced amount in the year 2024?",
     "SELECT SUM(total) FROM invoices WHERE invoice_date BETWEEN '2024-01-01' AND '2024-12-31'"),
    ("music_store", "List the titles of albums released before 1990 together with the name of their artist.",
     "SELECT al.title, ar.name FROM albums al JOIN artists ar ON al.artist_id = ar.artist_id WHERE al.release_year < 1990"),
    ("music_store", "Which customers have never received an invoice? Give their email addresses.",
     "SELECT email FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM invoices)"),
    ("music_store", "What is the name of the longest track, and the title of the album it is on?",
     "SELECT t.name, al.title FROM tracks t JOIN albums al ON t.album_id = al.album_id "
     "ORDER BY t.milliseconds DESC LIMIT 1"),
    ("music_store", "How many different countries do the customers come from?",
     "SELECT COUNT(DISTINCT country) FROM customers"),
    ("music_store", "How many invoices were issued in each month of 2023? Show the month as 'YYYY-MM' and the "
     "count, in calendar order.",
     "SELECT strftime('%Y-%m', invoice_date) AS month, COUNT(*) FROM invoices WHERE invoice_date LIKE '2023-%' "
     "GROUP BY month ORDER BY month"),
    ("music_store", "How many tracks cost more than the average track price?",
     "SELECT COUNT(*) FROM tracks WHERE unit_price > (SELECT AVG(unit_price) FROM tracks)"),
    ("music_store", "Which genre brought in the most revenue from invoice lines (unit price times quantity)? "
     "Give the genre name and the revenue.",
     "SELECT g.name, SUM(ii.unit_price * ii.quantity) AS revenue FROM invoice_items ii JOIN tracks t "
     "ON ii.track_id = t.track_id JOIN genres g ON t.genre_id = g.genre_id GROUP BY g.genre_id "
     "ORDER BY revenue DESC LIMIT 1"),
    ("music_store", "Which customer cities have more than 4 customers? Show each city with its number of customers.",
     "SELECT city, COUNT(*) FROM customers GROUP BY city HAVING COUNT(*) > 4"),
    # --- university ----------------------------------------------------------------------------
    ("university", "How many students major in Computer Science?",
     "SELECT COUNT(*) FROM students s JOIN departments d ON s.major_department_id = d.department_id "
     "WHERE d.name = 'Computer Science'"),
    ("university", "List the instructors with the rank of Professor and the name of their department.",
     "SELECT i.name, d.name FROM instructors i JOIN departments d ON i.department_id = d.department_id "
     "WHERE i.rank = 'Professor'"),
    ("university", "What is the average instructor salary in each department? Show the department name and the "
     "average, highest average first.",
     "SELECT d.name, AVG(i.salary) AS avg_salary FROM departments d JOIN instructors i "
     "ON i.department_id = d.department_id GROUP BY d.department_id ORDER BY avg_salary DESC"),
    ("university", "Which courses have more than 15 enrollments? Give the course code, title and number of "
     "enrollments.",
     "SELECT c.code, c.title, COUNT(*) FROM courses c JOIN enrollments e ON e.course_id = c.course_id "
     "GROUP BY c.course_id HAVING COUNT(*) > 15"),
    ("university", "Which students received an A in a Physics department course? Give first and last names "
     "(each student once).",
     "SELECT DISTINCT s.first_name, s.last_name FROM students s JOIN enrollments e ON e.student_id = s.student_id "
     "JOIN courses c ON c.course_id = e.course_id JOIN departments d ON d.department_id = c.department_id "
     "WHERE d.name = 'Physics' AND e.grade = 'A'"),
    ("university", "Which 4 students have the highest grade point average over their graded enrollments, among "
     "students with at least 4 graded enrollments? Give student id and the average points, best first.",
     "SELECT e.student_id, AVG(gp.points) AS gpa FROM enrollments e JOIN grade_points gp ON gp.grade = e.grade "
     "GROUP BY e.student_id HAVING COUNT(*) >= 4 ORDER BY gpa DESC LIMIT 4"),
    ("university", "Which department has the largest budget? Give its name and building.",
     "SELECT name, building FROM departments ORDER BY budget DESC LIMIT 1"),
    ("university", "How many students started in each enrollment year? Show the year and the count, oldest year "
     "first.",
     "SELECT enrollment_year, COUNT(*) FROM students GROUP BY enrollment_year ORDER BY enrollment_year"),
    ("university", "List the instructors hired after 2015 with their hire dates, earliest hire first.",
     "SELECT name, hire_date FROM instructors WHERE hire_date >= '2016-01-01' ORDER BY hire_date"),
    ("university", "Which courses had no enrollments in the 2024-Spring semester? Give their codes.",
     "SELECT code FROM courses c WHERE NOT EXISTS (SELECT 1 FROM enrollments e WHERE e.course_id = c.course_id "
     "AND e.semester = '2024-Spring')"),
    ("university", "Which students were born in 2003? Give first name, last name and birth date.",
     "SELECT first_name, last_name, birth_date FROM students WHERE birth_date BETWEEN '2003-01-01' AND '2003-12-31'"),
    ("university", "Enrollments without a grade are still in progress. How many in-progress enrollments are "
     "there in each semester that has any?",
     "SELECT semester, COUNT(*) FROM enrollments WHERE grade IS NULL GROUP BY semester"),
    ("university", "Which instructors teach more than one course? Give the instructor name and the number of "
     "courses.",
     "SELECT i.name, COUNT(*) FROM instructors i JOIN courses c ON c.instructor_id = i.instructor_id "
     "GROUP BY i.instructor_id HAVING COUNT(*) > 1"),
    ("university", "Which home countries have at least 8 students? Show the country and its number of students.",
     "SELECT home_country, COUNT(*) FROM students GROUP BY home_country HAVING COUNT(*) >= 8"),
    ("university", "How many credits has the student with id 17 earned? Credits count for every enrollment with "
     "a grade other than F; in-progress enrollments do not count.",
     "SELECT SUM(c.credits) FROM enrollments e JOIN courses c ON c.course_id = e.course_id "
     "WHERE e.student_id = 17 AND e.grade IS NOT NULL AND e.grade <> 'F'"),
    # --- hospital ------------------------------------------------------------------------------
    ("hospital", "How many patients have blood type O-?",
     "SELECT COUNT(*) FROM patients WHERE blood_type = 'O-'"),
    ("hospital", "List the cardiologists (doctors in the Cardiology department) with their consultation fees.",
     "SELECT d.name, d.consultation_fee FROM doctors d JOIN departments p ON d.department_id = p.department_id "
     "WHERE p.specialty = 'Cardiology'"),
    ("hospital", "How many appointments are there with each status?",
     "SELECT status, COUNT(*) FROM appointments GROUP BY status"),
    ("hospital", "Which doctor has the most completed appointments? Give the doctor's name and the count.",
     "SELECT d.name, COUNT(*) AS n FROM appointments a JOIN doctors d ON a.doctor_id = d.doctor_id "
     "WHERE a.status = 'completed' GROUP BY d.doctor_id ORDER BY n DESC LIMIT 1"),
    ("hospital", "List the patients born before 1945 with their birth dates, oldest first.",
     "SELECT first_name, last_name, birth_date FROM patients WHERE birth_date < '1945-01-01' ORDER BY birth_date"),
    ("hospital", "Which medication has been prescribed most often? Give its name and the number of prescriptions.",
     "SELECT m.name, COUNT(*) AS n FROM prescriptions p JOIN medications m ON p.medication_id = m.medication_id "
     "GROUP BY m.medication_id ORDER BY n DESC LIMIT 1"),
    ("hospital", "What is the average consultation fee in each specialty? Show the specialty and the average, "
     "most expensive first.",
     "SELECT p.specialty, AVG(d.consultation_fee) AS fee FROM doctors d JOIN departments p "
     "ON d.department_id = p.department_id GROUP BY p.department_id ORDER BY fee DESC"),
    ("hospital", "Which patients have seen more than 3 different doctors? Give patient id, first name and last "
     "name.",
     "SELECT p.patient_id, p.first_name, p.last_name FROM patients p JOIN appointments a ON a.patient_id = p.patient_id "
     "GROUP BY p.patient_id HAVING COUNT(DISTINCT a.doctor_id) > 3"),
    ("hospital", "How many appointments took place or are booked in March 2025?",
     "SELECT COUNT(*) FROM appointments WHERE appointment_date BETWEEN '2025-03-01' AND '2025-03-31'"),
    ("hospital", "For each drug class, what is the total medication cost of all prescriptions (days of supply "
     "times the medication's unit cost)? Show the class and the total, highest first.",
     "SELECT m.drug_class, SUM(p.days_supply * m.unit_cost) AS cost FROM prescriptions p JOIN medications m "
     "ON p.medication_id = m.medication_id GROUP BY m.drug_class ORDER BY cost DESC"),
    ("hospital", "Which patients have never had an appointment? Give their first and last names.",
     "SELECT first_name, last_name FROM patients WHERE patient_id NOT IN (SELECT patient_id FROM appointments)"),
    ("hospital", "How many Neurology appointments were cancelled?",
     "SELECT COUNT(*) FROM appointments a JOIN doctors d ON a.doctor_id = d.doctor_id JOIN departments p "
     "ON d.department_id = p.department_id WHERE p.specialty = 'Neurology' AND a.status = 'cancelled'"),
    ("hospital", "In which cities do more than 20 patients live? Show the city and the number of patients.",
     "SELECT city, COUNT(*) FROM patients GROUP BY city HAVING COUNT(*) > 20"),
    ("hospital", "Which doctors have more years of experience than the average doctor? Give their names and years "
     "of experience.",
     "SELECT name, years_experience FROM doctors WHERE years_experience > (SELECT AVG(years_experience) FROM doctors)"),
    ("hospital", "List the scheduled appointments after 2025-06-20: the appointment date, the patient's last name "
     "and the doctor's name, by date.",
     "SELECT a.appointment_date, p.last_name, d.name FROM appointments a JOIN patients p ON a.patient_id = p.patient_id "
     "JOIN doctors d ON a.doctor_id = d.doctor_id WHERE a.status = 'scheduled' AND a.appointment_date > '2025-06-20' "
     "ORDER BY a.appointment_date"),
    # --- retail --------------------------------------------------------------------------------
    ("retail", "How many products are in the Electronics category?",
     "SELECT COUNT(*) FROM products p JOIN categories c ON p.category_id = c.category_id WHERE c.name = 'Electronics'"),
    ("retail", "How many units of Wireless Earbuds have been sold in total?",
     "SELECT SUM(oi.quantity) FROM order_items oi JOIN products p ON oi.product_id = p.product_id "
     "WHERE p.name = 'Wireless Earbuds'"),
    ("retail", "What is the net revenue of each store (quantity times unit price, minus the discount fraction)? "
     "Show the store name and revenue, highest first.",
     "SELECT s.name, SUM(oi.quantity * oi.unit_price * (1 - oi.discount)) AS revenue FROM stores s JOIN orders o "
     "ON o.store_id = s.store_id JOIN order_items oi ON oi.order_id = o.order_id GROUP BY s.store_id "
     "ORDER BY revenue DESC"),
    ("retail", "What are the 2 best-selling products by units sold? Give the product names and units.",
     "SELECT p.name, SUM(oi.quantity) AS units FROM order_items oi JOIN products p ON oi.product_id = p.product_id "
     "GROUP BY p.product_id ORDER BY units DESC LIMIT 2"),
    ("retail", "List the employees of the Harbor store with the name of their manager.",
     "SELECT e.name, m.name FROM employees e JOIN employees m ON e.manager_id = m.employee_id JOIN stores s "
     "ON e.store_id = s.store_id WHERE s.name = 'Harbor'"),
    ("retail", "How many gold-tier customers are there in each state?",
     "SELECT state, COUNT(*) FROM customers WHERE loyalty_tier = 'gold' GROUP BY state"),
    ("retail", "Which products have fewer than 15 units in stock? Give the name and stock quantity.",
     "SELECT name, stock_quantity FROM products WHERE stock_quantity < 15"),
    ("retail", "How many online orders were placed in 2025?",
     "SELECT COUNT(*) FROM orders WHERE channel = 'online' AND order_date >= '2025-01-01'"),
    ("retail", "What is the average number of items (order lines) per order for each sales channel?",
     "SELECT o.channel, COUNT(oi.order_item_id) * 1.0 / COUNT(DISTINCT o.order_id) FROM orders o "
     "JOIN order_items oi ON oi.order_id = o.order_id GROUP BY o.channel"),
    ("retail", "Which categories have an average list price above 50? Give the category name and the average.",
     "SELECT c.name, AVG(p.list_price) FROM categories c JOIN products p ON p.category_id = c.category_id "
     "GROUP BY c.category_id HAVING AVG(p.list_price) > 50"),
    ("retail", "Which customers have ordered from more than 3 different stores? Give the customer names.",
     "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.customer_id "
     "HAVING COUNT(DISTINCT o.store_id) > 3"),
    ("retail", "Which products were not ordered at all in November 2024? Give their names.",
     "SELECT name FROM products WHERE product_id NOT IN (SELECT oi.product_id FROM order_items oi JOIN orders o "
     "ON o.order_id = oi.order_id WHERE o.order_date BETWEEN '2024-11-01' AND '2024-11-30')"),
    ("retail", "In which month of 2024 were the most orders placed? Give the month as 'YYYY-MM' and the number "
     "of orders.",
     "SELECT strftime('%Y-%m', order_date) AS month, COUNT(*) AS n FROM orders WHERE order_date LIKE '2024-%' "
     "GROUP BY month ORDER BY n DESC LIMIT 1"),
    ("retail", "What is the gross margin of each category, summing quantity times (discounted unit price minus "
     "unit cost) over all order lines? Show the category and margin.",
     "SELECT c.name, SUM(oi.quantity * (oi.unit_price * (1 - oi.discount) - p.unit_cost)) FROM order_items oi "
     "JOIN products p ON oi.product_id = p.product_id JOIN categories c ON p.category_id = c.category_id "
     "GROUP BY c.category_id"),
    ("retail", "List the store managers with the name of the store they run, highest salary first.",
     "SELECT e.name, s.name FROM employees e JOIN stores s ON e.store_id = s.store_id WHERE e.role = 'Store Manager' "
     "ORDER BY e.salary DESC"),
)


def sql_examples(directory: Path | None = None) -> list[dspy.Example]:
    """All built-in SQL examples, databases built on demand, in the order of `QUESTIONS`."""
    from dspy_hero.execution.sqlite_environment import schema_text

    paths = ensure_databases(directory)
    schemas = {db_id: schema_text(path) for db_id, path in paths.items()}
    counters: dict[str, int] = {}
    examples = []
    for db_id, question, gold in QUESTIONS:
        counters[db_id] = counters.get(db_id, 0) + 1
        examples.append(
            dspy.Example(
                example_id=f"{db_id}-{counters[db_id]:02d}",
                question=question,
                db_schema=schemas[db_id],
                db_id=db_id,
                db_path=str(paths[db_id]),
                gold_sql=gold,
            ).with_inputs(*INPUTS, *ENV_INPUTS)
        )
    return examples


def split_within_groups(
    examples: list[dspy.Example], group: str, test_fraction: float, seed: int
) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """Hold out the same fraction of every group (seeded order inside each group); file order kept."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    held: set[str] = set()
    groups: dict[str, list[dspy.Example]] = {}
    for ex in examples:
        groups.setdefault(str(ex[group]), []).append(ex)
    for members in groups.values():
        ordered = seeded_order(members, seed, key=lambda ex: str(ex["example_id"]))
        n_test = min(len(members) - 1, max(1, round(test_fraction * len(members))))
        held.update(str(ex["example_id"]) for ex in ordered[len(members) - n_test :])
    train = [ex for ex in examples if str(ex["example_id"]) not in held]
    test = [ex for ex in examples if str(ex["example_id"]) in held]
    return train, test


def builtin_sql_task(
    split_seed: int = 0, test_fraction: float = 1 / 3, directory: Path | None = None, **_: object
) -> Task:
    """The built-in text-to-SQL Task (BIRD set-equality semantics, seed program with the default prompt)."""
    from dspy_hero.metrics.sql import sql_execution_metric
    from dspy_hero.tasks.builtin.task_builder import make_task

    examples = sql_examples(directory)
    train, test = split_within_groups(examples, "db_id", test_fraction, split_seed)
    note = (
        f"builtin-sql: {len(examples)} questions over {len(DATABASES)} generated SQLite databases "
        f"({', '.join(DATABASES)}); within each database a seeded order (seed {split_seed}) holds out "
        f"{test_fraction:.2f} of the questions for test: {len(train)} train / {len(test)} test, every database on "
        "both sides (unseen questions, seen schemas). Semantics: BIRD execution accuracy (set equality)."
    )
    return make_task(
        name="builtin-sql", language="sql", train=train, test=test, metric=sql_execution_metric(),
        inputs=INPUTS, group_key="db_id", split_note=note,
    )
