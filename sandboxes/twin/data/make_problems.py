"""Generate ``arithmetic_problems.json``: 300 GSM8K-like grade-school word problems with integer answers.

Run once (output is committed): ``python3 sandboxes/twin/data/make_problems.py``. The generator is
deterministic (fixed seed, no dependence on hash randomisation), so re-running it reproduces the file byte
for byte. Each problem is multi-step; every solution is a few short worked lines ending in ``#### <answer>``,
and its last line before ``####`` states the answer, which is what ``problems.answer_for`` rewrites when the
simulated model gets a question wrong.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

SEED = 20250207
COUNT = 300
OUT = Path(__file__).with_name("arithmetic_problems.json")

# (name, subject pronoun, possessive pronoun)
PEOPLE = [
    ("Maya", "she", "her"), ("Liam", "he", "his"), ("Priya", "she", "her"), ("Noah", "he", "his"),
    ("Sofia", "she", "her"), ("Mateo", "he", "his"), ("Aisha", "she", "her"), ("Ethan", "he", "his"),
    ("Chloe", "she", "her"), ("Kenji", "he", "his"), ("Zara", "she", "her"), ("Omar", "he", "his"),
    ("Elena", "she", "her"), ("Lucas", "he", "his"), ("Hana", "she", "her"), ("Diego", "he", "his"),
    ("Grace", "she", "her"), ("Tariq", "he", "his"), ("Nora", "she", "her"), ("Felix", "he", "his"),
    ("Ines", "she", "her"), ("Ravi", "he", "his"), ("Leah", "she", "her"), ("Samuel", "he", "his"),
]
ITEMS = [  # (singular, plural, price range)
    ("notebook", "notebooks", (2, 6)), ("pen", "pens", (1, 3)), ("apple", "apples", (1, 2)),
    ("comic book", "comic books", (3, 9)), ("sandwich", "sandwiches", (4, 8)), ("candle", "candles", (3, 7)),
    ("sticker pack", "sticker packs", (1, 4)), ("bag of rice", "bags of rice", (5, 12)),
    ("T-shirt", "T-shirts", (8, 15)), ("plant pot", "plant pots", (4, 10)), ("puzzle", "puzzles", (6, 14)),
    ("bottle of juice", "bottles of juice", (2, 5)), ("box of crayons", "boxes of crayons", (2, 6)),
]
VEHICLES = ["train", "bus", "truck", "car", "cyclist", "boat"]
ANIMALS = [("chickens", 2), ("ducks", 2), ("cows", 4), ("goats", 4), ("pigs", 4), ("sheep", 4)]
FRACTIONS = [(1, 2), (1, 3), (2, 3), (1, 4), (3, 4), (2, 5), (3, 5), (1, 5), (5, 6), (3, 8)]
CROPS = [("tomato", "tomatoes"), ("pepper", "peppers"), ("strawberry", "strawberries"), ("bean", "beans"),
         ("cucumber", "cucumbers")]
BIG_ITEMS = ["bike", "guitar", "tablet", "skateboard", "telescope", "camera"]


def _person(rng: random.Random) -> tuple[str, str, str]:
    return rng.choice(PEOPLE)


def _two_people(rng: random.Random) -> tuple[tuple[str, str, str], tuple[str, str, str]]:
    a, b = rng.sample(PEOPLE, 2)
    return a, b


def shopping_change(rng: random.Random) -> tuple[str, list[str], int]:
    name, she, _ = _person(rng)
    (s1, p1, r1), (s2, p2, r2) = rng.sample(ITEMS, 2)
    a, b = rng.randint(2, 7), rng.randint(2, 6)
    c1, c2 = rng.randint(*r1), rng.randint(*r2)
    t1, t2 = a * c1, b * c2
    total = t1 + t2
    bill = next(x for x in (20, 50, 100, 200) if x > total)
    ans = bill - total
    q = (f"{name} buys {a} {p1} for ${c1} each and {b} {p2} for ${c2} each. "
         f"{she.capitalize()} pays with a ${bill} bill. How much change does {she} get back?")
    sol = [f"The {p1} cost {a} * {c1} = ${t1}.", f"The {p2} cost {b} * {c2} = ${t2}.",
           f"In total {she} spends {t1} + {t2} = ${total}.", f"{she.capitalize()} gets {bill} - {total} = ${ans} back."]
    return q, sol, ans


def trip_distance(rng: random.Random) -> tuple[str, list[str], int]:
    v = rng.choice(VEHICLES)
    s1, h1 = rng.randint(4, 16) * 5, rng.randint(2, 5)
    s2, h2 = rng.randint(4, 16) * 5, rng.randint(1, 4)
    d1, d2 = s1 * h1, s2 * h2
    ans = d1 + d2
    q = (f"A {v} travels at {s1} miles per hour for {h1} hours, then slows to {s2} miles per hour "
         f"for another {h2} hours. How many miles does the {v} travel in total?")
    sol = [f"In the first part it travels {s1} * {h1} = {d1} miles.",
           f"In the second part it travels {s2} * {h2} = {d2} miles.", f"In total it travels {d1} + {d2} = {ans} miles."]
    return q, sol, ans


def trip_minutes(rng: random.Random) -> tuple[str, list[str], int]:
    name, she, _ = _person(rng)
    speed = rng.choice([20, 30, 40, 48, 60, 72])
    minutes_out = rng.choice([15, 20, 30, 45, 50, 75, 90])
    dist = speed * minutes_out // 60
    while dist * 60 % speed:  # keep every step an integer
        minutes_out += 5
        dist = speed * minutes_out // 60
    minutes_out = dist * 60 // speed
    stop = rng.randint(2, 6) * 5
    ans = 2 * minutes_out + stop
    q = (f"{name} drives {dist} miles to a lake at {speed} miles per hour, stops there for {stop} minutes, "
         f"and drives back the same way at the same speed. How many minutes does the whole outing take?")
    sol = [f"One way takes {dist} / {speed} hours, which is {dist} * 60 / {speed} = {minutes_out} minutes.",
           f"Driving both ways takes 2 * {minutes_out} = {2 * minutes_out} minutes.",
           f"With the stop the outing takes {2 * minutes_out} + {stop} = {ans} minutes."]
    return q, sol, ans


def ages_multiple(rng: random.Random) -> tuple[str, list[str], int]:
    (a, _, _), (b, _, _) = _two_people(rng)
    k = rng.randint(2, 5)
    b_now = rng.randint(3, 14)
    n = rng.randint(2, 9)
    a_now = k * b_now
    ans = a_now + n
    q = (f"{a} is {k} times as old as {b}. In {n} years, {b} will be {b_now + n} years old. "
         f"How old will {a} be in {n} years?")
    sol = [f"{b} is now {b_now + n} - {n} = {b_now} years old.", f"{a} is now {k} * {b_now} = {a_now} years old.",
           f"In {n} years {a} will be {a_now} + {n} = {ans} years old."]
    return q, sol, ans


def ages_sum(rng: random.Random) -> tuple[str, list[str], int]:
    (a, _, _), (b, _, _) = _two_people(rng)
    b_age = rng.randint(6, 40)
    d = rng.randint(2, 15)
    s = 2 * b_age + d
    years = rng.randint(2, 10)
    ans = b_age + d + years
    q = (f"{a} is {d} years older than {b}. Right now the sum of their ages is {s}. "
         f"How old will {a} be in {years} years?")
    sol = [f"Twice {b}'s age is {s} - {d} = {s - d}, so {b} is {s - d} / 2 = {b_age}.",
           f"{a} is {b_age} + {d} = {b_age + d} years old now.",
           f"In {years} years {a} will be {b_age + d} + {years} = {ans}."]
    return q, sol, ans


def fraction_group(rng: random.Random) -> tuple[str, list[str], int]:
    n1, d1 = rng.choice(FRACTIONS)
    n2, d2 = rng.choice(FRACTIONS)
    unit = d1 * d2
    total = unit * rng.randint(1, max(1, 120 // unit) + 1)
    girls = total * n1 // d1
    glasses = girls * n2 // d2
    ans = girls - glasses
    place = rng.choice(["class", "school choir", "summer camp group", "chess club", "dance class"])
    q = (f"There are {total} children in a {place}. {n1}/{d1} of them are girls, and {n2}/{d2} of the girls "
         f"wear glasses. How many girls in the {place} do not wear glasses?")
    sol = [f"There are {total} * {n1} / {d1} = {girls} girls.",
           f"Of them, {girls} * {n2} / {d2} = {glasses} wear glasses.",
           f"So {girls} - {glasses} = {ans} girls do not wear glasses."]
    return q, sol, ans


def wages(rng: random.Random) -> tuple[str, list[str], int]:
    name, she, _ = _person(rng)
    rate, hours, days, weeks = rng.randint(9, 25), rng.randint(3, 8), rng.randint(2, 6), rng.randint(2, 6)
    day_pay = rate * hours
    week_pay = day_pay * days
    ans = week_pay * weeks
    job = rng.choice(["at a bakery", "as a lifeguard", "at the library", "tutoring math", "at a garden centre"])
    q = (f"{name} works {job} and earns ${rate} per hour. {she.capitalize()} works {hours} hours a day, "
         f"{days} days a week. How much money does {she} earn in {weeks} weeks?")
    sol = [f"Each day {she} earns {rate} * {hours} = ${day_pay}.", f"Each week {she} earns {day_pay} * {days} = ${week_pay}.",
           f"In {weeks} weeks {she} earns {week_pay} * {weeks} = ${ans}."]
    return q, sol, ans


def tank_fill(rng: random.Random) -> tuple[str, list[str], int]:
    fill = rng.randint(6, 20)
    leak = rng.randint(1, fill - 2)
    net = fill - leak
    ans = rng.randint(5, 40)
    cap = net * ans
    q = (f"An empty tank holds {cap} liters. A pipe pours in {fill} liters per minute, but a leak lets "
         f"{leak} liters per minute drain out. How many minutes does it take to fill the tank?")
    sol = [f"Each minute the tank gains {fill} - {leak} = {net} liters.",
           f"Filling {cap} liters takes {cap} / {net} = {ans} minutes."]
    return q, sol, ans


def cookies(rng: random.Random) -> tuple[str, list[str], int]:
    name, she, her = _person(rng)
    batches, per = rng.randint(2, 6), rng.randint(8, 24)
    baked = batches * per
    neighbours = rng.randint(2, 6)
    each = rng.randint(2, max(2, baked // (neighbours * 2)))
    given = neighbours * each
    eaten = rng.randint(1, max(1, (baked - given) // 3))
    ans = baked - given - eaten
    treat = rng.choice(["cookies", "muffins", "brownies", "cupcakes"])
    self_ = "herself" if she == "she" else "himself"
    q = (f"{name} bakes {batches} batches of {treat} with {per} {treat} in each batch. {she.capitalize()} gives "
         f"{each} {treat} to each of {her} {neighbours} neighbors and eats {eaten} {treat} {self_}. "
         f"How many {treat} are left?")
    sol = [f"{she.capitalize()} bakes {batches} * {per} = {baked} {treat}.",
           f"{she.capitalize()} gives away {neighbours} * {each} = {given} {treat}.",
           f"There are {baked} - {given} - {eaten} = {ans} {treat} left."]
    return q, sol, ans


def discount(rng: random.Random) -> tuple[str, list[str], int]:
    name, she, _ = _person(rng)
    pct = rng.choice([10, 20, 25, 30, 40, 50])
    step = {10: 10, 20: 5, 25: 4, 30: 10, 40: 5, 50: 2}[pct]
    price = step * rng.randint(max(2, 20 // step), 300 // step)
    off = price * pct // 100
    sale = price - off
    qty = rng.randint(1, 3)
    ship = rng.randint(3, 12)
    ans = qty * sale + ship
    thing = rng.choice(["jacket", "pair of boots", "backpack", "lamp", "board game", "rug"])
    q = (f"A {thing} normally costs ${price}. This week it is {pct}% off. {name} buys {qty} of them "
         f"and pays ${ship} for delivery. How much does {she} pay in total?")
    sol = [f"The discount is {price} * {pct} / 100 = ${off}, so each costs {price} - {off} = ${sale}.",
           f"{qty} of them cost {qty} * {sale} = ${qty * sale}.",
           f"With delivery {she} pays {qty * sale} + {ship} = ${ans}."]
    return q, sol, ans


def savings(rng: random.Random) -> tuple[str, list[str], int]:
    name, she, _ = _person(rng)
    weekly = rng.randint(5, 30)
    ans = rng.randint(3, 20)
    saved = rng.randint(10, 150)
    gift = rng.choice([0, 0, 10, 20, 25])
    cost = saved + gift + weekly * ans
    thing = rng.choice(BIG_ITEMS)
    her, him = ("her", "her") if she == "she" else ("his", "him")
    extra = f" and {her} aunt gives {him} ${gift}" if gift else ""
    q = (f"{name} wants a {thing} that costs ${cost}. {she.capitalize()} has already saved ${saved}{extra}. "
         f"If {she} saves ${weekly} every week, how many weeks will it take to have exactly enough?")
    have = saved + gift
    sol = ([f"{she.capitalize()} starts with {saved} + {gift} = ${have}."] if gift
           else [f"{she.capitalize()} starts with ${have}."])
    sol += [f"{she.capitalize()} still needs {cost} - {have} = ${cost - have}.",
            f"That takes {cost - have} / {weekly} = {ans} weeks."]
    return q, sol, ans


def farm_legs(rng: random.Random) -> tuple[str, list[str], int]:
    name, _, her = _person(rng)
    (a1, l1), (a2, l2), (a3, l3) = rng.sample(ANIMALS, 3)
    n1, n2, n3 = rng.randint(3, 25), rng.randint(2, 15), rng.randint(2, 12)
    g1, g2, g3 = n1 * l1, n2 * l2, n3 * l3
    ans = g1 + g2 + g3
    q = (f"On {name}'s farm there are {n1} {a1}, {n2} {a2} and {n3} {a3}. "
         f"How many legs do all of these animals have together?")
    sol = [f"The {a1} have {n1} * {l1} = {g1} legs.", f"The {a2} have {n2} * {l2} = {g2} legs.",
           f"The {a3} have {n3} * {l3} = {g3} legs.", f"Together they have {g1} + {g2} + {g3} = {ans} legs."]
    return q, sol, ans


def money_fractions(rng: random.Random) -> tuple[str, list[str], int]:
    name, she, _ = _person(rng)
    num, den = rng.choice(FRACTIONS)
    pct = rng.choice([10, 20, 25, 50])
    # money must divide by den, and the remainder must allow an integer percentage
    unit = den * {10: 10, 20: 5, 25: 4, 50: 2}[pct]
    money = unit * rng.randint(2, max(2, 400 // unit))
    while (money - money * num // den) * pct % 100:
        money += unit
    books = money * num // den
    rest = money - books
    lunch = rest * pct // 100
    ans = rest - lunch
    q = (f"{name} had ${money}. {she.capitalize()} spent {num}/{den} of it on books and then {pct}% of what was "
         f"left on lunch. How many dollars does {she} have now?")
    sol = [f"{she.capitalize()} spent {money} * {num} / {den} = ${books} on books, leaving {money} - {books} = ${rest}.",
           f"Lunch cost {rest} * {pct} / 100 = ${lunch}.", f"{she.capitalize()} has {rest} - {lunch} = ${ans} left."]
    return q, sol, ans


def pizza_share(rng: random.Random) -> tuple[str, list[str], int]:
    friends = rng.randint(3, 9)
    slices = rng.choice([6, 8, 10, 12])
    each = rng.randint(2, 6)
    pizzas = -(-friends * each // slices) + rng.randint(0, 2)
    total = pizzas * slices
    eaten = friends * each
    ans = total - eaten
    q = (f"{friends} friends order {pizzas} pizzas, and each pizza is cut into {slices} slices. "
         f"If every friend eats {each} slices, how many slices are left over?")
    sol = [f"There are {pizzas} * {slices} = {total} slices.", f"The friends eat {friends} * {each} = {eaten} slices.",
           f"So {total} - {eaten} = {ans} slices are left."]
    return q, sol, ans


def garden_boxes(rng: random.Random) -> tuple[str, list[str], int]:
    name, she, _ = _person(rng)
    crop, crops = rng.choice(CROPS)
    rows, per_row, yield_ = rng.randint(3, 12), rng.randint(4, 15), rng.randint(3, 12)
    box = rng.choice([4, 5, 6, 8, 10, 12])
    plants = rows * per_row
    while plants * yield_ % box:  # whole boxes only
        yield_ += 1
    harvest = plants * yield_
    ans = harvest // box
    q = (f"{name} plants {rows} rows of {crop} plants with {per_row} plants in each row. Each plant gives "
         f"{yield_} {crops}. {she.capitalize()} packs all of them into boxes of {box}. How many boxes does {she} fill?")
    sol = [f"There are {rows} * {per_row} = {plants} plants.", f"They give {plants} * {yield_} = {harvest} {crops}.",
           f"That fills {harvest} / {box} = {ans} boxes."]
    return q, sol, ans


def reading(rng: random.Random) -> tuple[str, list[str], int]:
    name, she, _ = _person(rng)
    mon = rng.randint(8, 40)
    mult = rng.randint(2, 3)
    tue = mon * mult
    wed = rng.randint(5, 30)
    read = mon + tue + wed
    ans = rng.randint(10, 200)
    pages = read + ans
    word = {2: "twice", 3: "three times"}[mult]
    q = (f"A book has {pages} pages. {name} reads {mon} pages on Monday, {word} as many on Tuesday, and {wed} "
         f"pages on Wednesday. How many pages does {she} still have to read?")
    sol = [f"On Tuesday {she} reads {mon} * {mult} = {tue} pages.",
           f"So far {she} has read {mon} + {tue} + {wed} = {read} pages.", f"{she.capitalize()} has {pages} - {read} = {ans} pages left."]
    return q, sol, ans


def bulk_rate(rng: random.Random) -> tuple[str, list[str], int]:
    machines = rng.randint(2, 8)
    per_min = rng.randint(3, 15)
    hours = rng.randint(2, 8)
    per_hour = machines * per_min * 60
    made = per_hour * hours
    defect = rng.choice([2, 4, 5, 10, 20, 25])
    while made * defect % 100:
        hours += 1
        made = per_hour * hours
    bad = made * defect // 100
    ans = made - bad
    thing = rng.choice(["bottles", "bolts", "labels", "cans", "bricks"])
    q = (f"A factory has {machines} machines. Each machine makes {per_min} {thing} per minute. The machines run "
         f"for {hours} hours, and {defect}% of the {thing} are rejected as faulty. How many good {thing} are made?")
    sol = [f"Per hour the machines make {machines} * {per_min} * 60 = {per_hour} {thing}.",
           f"In {hours} hours they make {per_hour} * {hours} = {made}.",
           f"{made} * {defect} / 100 = {bad} are faulty, so {made} - {bad} = {ans} are good."]
    return q, sol, ans


TEMPLATES: list[Callable[[random.Random], tuple[str, list[str], int]]] = [
    shopping_change, trip_distance, trip_minutes, ages_multiple, ages_sum, fraction_group, wages, tank_fill,
    cookies, discount, savings, farm_legs, money_fractions, pizza_share, garden_boxes, reading, bulk_rate,
]


def generate(count: int = COUNT, seed: int = SEED) -> list[dict]:
    rng = random.Random(seed)
    problems: list[dict] = []
    seen: set[str] = set()
    i = 0
    while len(problems) < count:
        template = TEMPLATES[i % len(TEMPLATES)]
        i += 1
        question, lines, answer = template(rng)
        if question in seen or answer <= 0 or any(question in q or q in question for q in seen):
            continue
        if str(answer) not in lines[-1]:
            raise AssertionError(f"{template.__name__}: last line must state the answer: {lines[-1]}")
        seen.add(question)
        problems.append({
            "id": f"arith-{len(problems) + 1:04d}",
            "question": question,
            "answer": answer,
            "solution": "\n".join(lines) + f"\n#### {answer}",
        })
    return problems


def main() -> None:
    problems = generate()
    OUT.write_text(json.dumps(problems, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(problems)} problems to {OUT}")


if __name__ == "__main__":
    main()
