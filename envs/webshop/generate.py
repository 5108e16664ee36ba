"""Generate a WebShop catalogue in the official file format.

    python -m envs.webshop.generate --num-products 1000 --seed 0 [--out DIR]

writes ``items_shuffle_<N>.json``, ``items_ins_v2_<N>.json``, ``items_human_ins.json`` and ``reviews.json``
(formats in ``envs/webshop/data.py``) to DIR, by default ``envs.paths.cache_dir("webshop",
"generated_v<version>_n<N>_seed<S>")``, which is also where the environment generates it on first use.

How goals stay solvable and search stays insufficient [choice]: products come in families. A base product
of some type (``vocab.PRODUCT_TYPES``) draws 3-5 attributes of its type's pool, option values for each of
its type's groups, and a price; its synthetic instruction asks for 1-3 of its attributes, and the goal
construction adds one option combination and a price bound above its price, so buying it with those
options scores 1.0. Its siblings share its type (same query, category and title nouns) and differ in one
way only:

* attribute near miss: one of the base's instruction attributes is replaced by another of the pool
  (absent from its attribute list and from every line of its text);
* option near miss: its first option group offers none of the base's values of that group (when the pool
  allows, else at least one value less);
* price near miss: the same attributes and options at a price above every bound a base goal can have.

Deterministic for a seed: one ``random.Random(seed)`` drives everything, in a fixed order.
The text is template-made: results on this catalogue are not comparable to published WebShop numbers.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import string
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .config import PRICE_GRID
from .vocab import PRODUCT_TYPES, ProductType, check_vocabulary

__all__ = ["GENERATOR_VERSION", "generate_records", "write_catalogue", "ensure_generated", "generated_dir", "main"]

GENERATOR_VERSION = 1
MIN_PRODUCTS, MAX_PRODUCTS = 100, 10_000

_DESCRIPTORS = ("Classic", "Everyday", "Signature", "Essential", "Deluxe", "Prime", "Studio", "Urban", "Heritage",
                "Daily", "Select", "Trail", "Nova", "Summit", "Harbor", "Meadow")
_ONSETS = ("b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "cr", "dr", "fl", "gr",
           "pl", "pr", "st", "tr", "qu", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou")
_CODAS = ("n", "r", "x", "ra", "na", "lo", "ta", "ve", "ly", "mo", "ric", "dex")
_BULLET_TEMPLATES = (
    "{A}: this {t} is made with {a} in mind for daily use",
    "{A}: customers choose this {t} for its {a}",
    "{A}: {a} you can count on, wash after wash and day after day",
    "{A}: thoughtfully built around {a}",
)
_GENERIC_BULLETS = (
    "WHAT YOU GET: one {t} and our friendly customer service",
    "EASY RETURNS: contact us with any question about your order",
    "GIFT IDEA: a thoughtful present for family and friends",
    "QUALITY CHECKED: every unit is inspected before shipping",
)
_DESCRIPTION_OPENERS = (
    "The {brand} {title} is designed for people who want dependable everyday performance.",
    "Meet the {brand} {title}, a dependable choice at a fair price.",
    "{brand} made this {title} to be simple, reliable and easy to love.",
)
_DESCRIPTION_CLOSERS = (
    "Order today and see why shoppers keep coming back.",
    "Backed by our customer support team.",
    "Carefully packed and shipped from our warehouse.",
)
_INSTRUCTION_TEMPLATES = (
    "i need {attrs} {phrase}",
    "i am looking for {attrs} {phrase}",
    "i want to buy {attrs} {phrase}",
    "find me {attrs} {phrase}",
    "i would like {attrs} {phrase}",
)
_HUMAN_TEMPLATES = (
    "can you help me find {phrase} that is {attrs}",
    "please get me {phrase}, it should be {attrs}",
    "shopping for {phrase}: {attrs} would be great",
)
_REVIEW_TITLES = ("Great value", "Works as described", "Love it", "Not bad", "Could be better", "Exactly what I wanted")
_REVIEW_BODIES = ("I bought this {t} last month and it does the job.", "My second {t} from this brand, no complaints.",
                  "Shipping was quick and the {t} looks nice.", "The {t} is fine, though I expected a bit more.")


@dataclass
class _Spec:
    ptype: ProductType
    brand: str
    descriptor: str
    attributes: list[str]
    instruction_attributes: list[str]
    options: dict[str, list[str]]
    price: float | tuple[float, float]
    family: int
    role: str
    extra: dict = field(default_factory=dict)


def _pool_order(ptype: ProductType, attrs) -> list[str]:
    return [a for a in ptype.attributes if a in set(attrs)]


def _money(x: float) -> float:
    return round(max(1.0, x), 2)


def _draw_price(ptype: ProductType, rng: random.Random) -> float | tuple[float, float]:
    lo, hi = ptype.price
    p = _money(int(rng.uniform(lo, hi)) + rng.choice((0.99, 0.49, 0.95, 0.0)))
    if rng.random() < 0.05:  # a few ranged prices, as in the real data ("$a - $b")
        return (p, _money(p * rng.uniform(1.05, 1.3)))
    return p


def _max_price(price) -> float:
    return price[1] if isinstance(price, tuple) else price


def _scaled_price(price, factor: float):
    if isinstance(price, tuple):
        return (_money(price[0] * factor), _money(price[1] * factor))
    return _money(price * factor)


def _base(ptype: ProductType, rng: random.Random, brand: str, descriptor: str, family: int) -> _Spec:
    n_attrs = rng.randint(3, min(5, len(ptype.attributes)))
    attrs = _pool_order(ptype, rng.sample(ptype.attributes, n_attrs))
    ins = _pool_order(ptype, rng.sample(attrs, rng.randint(1, min(3, n_attrs))))
    options = {}
    for name, pool, lo, hi in ptype.options:
        k = rng.randint(lo, hi)
        options[name] = [pool[i] for i in sorted(rng.sample(range(len(pool)), k))]
    return _Spec(ptype, brand, descriptor, attrs, ins, options, _draw_price(ptype, rng), family, "base")


def _attribute_sibling(b: _Spec, rng: random.Random, brand: str, descriptor: str) -> _Spec | None:
    spare = [a for a in b.ptype.attributes if a not in b.attributes]
    if not spare:
        return None
    dropped = rng.choice(b.instruction_attributes)
    attrs = _pool_order(b.ptype, [a for a in b.attributes if a != dropped] + [rng.choice(spare)])
    ins = _pool_order(b.ptype, rng.sample(attrs, rng.randint(1, min(3, len(attrs)))))
    return _Spec(b.ptype, brand, descriptor, attrs, ins, {k: list(v) for k, v in b.options.items()},
                 _scaled_price(b.price, rng.uniform(0.85, 1.0)), b.family, "attribute near miss",
                 {"missing": dropped})


def _option_sibling(b: _Spec, rng: random.Random, brand: str, descriptor: str) -> _Spec | None:
    if not b.ptype.options:
        return None
    name, pool, lo, hi = b.ptype.options[0]
    have = set(b.options[name])
    others = [v for v in pool if v not in have]
    if others:
        picked = set(rng.sample(others, rng.randint(1, min(len(others), hi))))
        chosen = [v for v in pool if v in picked]
    elif len(have) > 1:
        drop = rng.choice(sorted(have))
        chosen = [v for v in b.options[name] if v != drop]
    else:
        return None
    options = {k2: list(v) for k2, v in b.options.items()}
    options[name] = chosen
    return _Spec(b.ptype, brand, descriptor, list(b.attributes), list(b.instruction_attributes), options,
                 _scaled_price(b.price, rng.uniform(0.85, 1.0)), b.family, "option near miss", {"group": name})


def _price_sibling(b: _Spec, rng: random.Random, brand: str, descriptor: str) -> _Spec | None:
    above = [p for p in PRICE_GRID if p > _max_price(b.price)][:4]
    if len(above) < 2:
        return None
    price = _money(above[-1] + rng.uniform(1.0, 25.0))  # above every bound a base goal can draw
    return _Spec(b.ptype, brand, descriptor, list(b.attributes), list(b.instruction_attributes),
                 {k: list(v) for k, v in b.options.items()}, price, b.family, "price near miss")


def _brands(rng: random.Random, n: int) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        name = (rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_ONSETS) + rng.choice(_VOWELS)
                + rng.choice(_CODAS)).capitalize()
        if name not in seen and len(name) <= 10:
            seen.add(name)
            out.append(name)
    return out


def _render(spec: _Spec, asin: str, rng: random.Random) -> tuple[dict, dict, list | None, dict]:
    t = spec.ptype
    tl = t.title.lower()
    title_attrs = spec.attributes[: rng.randint(0, min(2, len(spec.attributes)))]
    title = f"{spec.brand} {spec.descriptor} {t.title}"
    if title_attrs:
        title += " - " + ", ".join(a.title() for a in title_attrs)
    bullets = [rng.choice(_BULLET_TEMPLATES).format(A=a.upper(), a=a, t=tl) for a in spec.attributes]
    bullets += [g.format(t=tl) for g in rng.sample(_GENERIC_BULLETS, 2)]
    desc_attrs = spec.attributes[:]
    rng.shuffle(desc_attrs)
    description = " ".join([
        rng.choice(_DESCRIPTION_OPENERS).format(brand=spec.brand, title=tl),
        f"It brings together {', '.join(desc_attrs[:-1])} and {desc_attrs[-1]}." if len(desc_attrs) > 1
        else f"It offers {desc_attrs[0]}.",
        rng.choice(_DESCRIPTION_CLOSERS),
    ])
    if isinstance(spec.price, tuple):
        pricing = f"${spec.price[0]:.2f} - ${spec.price[1]:.2f}"
    else:
        pricing = f"${spec.price:.2f}"
    product = {
        "asin": asin,
        "name": title,
        "full_description": description,
        "small_description": bullets,
        "pricing": pricing,
        "images": [f"images/{asin}.jpg"],
        "product_category": t.path,
        "query": t.query,
        "category": t.category,
        "brand": spec.brand,
        "customization_options": {name: [{"value": v, "image": None} for v in values]
                                  for name, values in spec.options.items()} or None,
    }
    attrs_phrase = " and ".join(spec.instruction_attributes)
    instruction = rng.choice(_INSTRUCTION_TEMPLATES).format(attrs=attrs_phrase, phrase=t.phrase)
    ins_entry = {"attributes": list(spec.attributes), "instruction": instruction,
                 "instruction_attributes": list(spec.instruction_attributes)}
    human = None
    if rng.random() < 0.5:
        values = [rng.choice(v) for v in spec.options.values()]
        human = [{"asin": asin,
                  "instruction": rng.choice(_HUMAN_TEMPLATES).format(phrase=t.phrase, attrs=attrs_phrase)
                  + (f", in {' and '.join(values)}" if values else ""),
                  "instruction_attributes": list(spec.instruction_attributes),
                  "instruction_options": values}]
    n_reviews = rng.randint(0, 3)
    reviews = [{"title": rng.choice(_REVIEW_TITLES), "stars": rng.choice((2, 3, 4, 4, 5, 5, 5)),
                "review": rng.choice(_REVIEW_BODIES).format(t=tl)} for _ in range(n_reviews)]
    rating = round(sum(r["stars"] for r in reviews) / n_reviews, 1) if reviews else round(rng.uniform(3.5, 5.0), 1)
    review_entry = {"asin": asin, "reviews": reviews, "average_rating": rating}
    return product, ins_entry, human, review_entry


def _leaks(spec: _Spec, product: dict) -> list[str]:
    """Pool attributes the product does not have but its text contains (would break a near miss)."""
    text = " ".join([product["name"], product["full_description"], *product["small_description"]]).lower()
    return [a for a in spec.ptype.attributes if a not in spec.attributes and a in text]


def generate_records(num_products: int, seed: int, progress: bool = False) -> dict:
    """The four files' contents for ``num_products`` products (``MIN_PRODUCTS``..``MAX_PRODUCTS``)."""
    if not MIN_PRODUCTS <= num_products <= MAX_PRODUCTS:
        raise ValueError(f"num_products={num_products} must lie in {MIN_PRODUCTS}..{MAX_PRODUCTS}")
    problems = check_vocabulary()
    if problems:  # pragma: no cover - guarded by a test
        raise RuntimeError("the WebShop generator vocabulary lets near misses match: " + "; ".join(problems))
    rng = random.Random(seed)
    brands = _brands(rng, 120)
    specs: list[_Spec] = []
    family = 0
    while len(specs) < num_products:
        ptype = PRODUCT_TYPES[rng.randrange(len(PRODUCT_TYPES))]
        base = _base(ptype, rng, rng.choice(brands), rng.choice(_DESCRIPTORS), family)
        specs.append(base)
        for make, prob in ((_attribute_sibling, 0.7), (_option_sibling, 0.7), (_price_sibling, 0.5)):
            if rng.random() < prob:
                sib = make(base, rng, rng.choice(brands), rng.choice(_DESCRIPTORS))
                if sib is not None:
                    specs.append(sib)
        family += 1
    specs = specs[:num_products]
    rng.shuffle(specs)  # the official file is shuffled too; keeps families apart and prefixes representative

    asins: set[str] = set()
    products, attributes, human, reviews = [], {}, {}, []
    alphabet = string.ascii_uppercase + string.digits
    iterator = specs
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(specs), desc="generating WebShop catalogue", unit="product", file=sys.stderr)
    for spec in iterator:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        while asin in asins:
            asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        asins.add(asin)
        for _ in range(50):
            product, ins_entry, human_entry, review_entry = _render(spec, asin, rng)
            if not _leaks(spec, product):
                break
            spec = replace(spec, brand=rng.choice(brands), descriptor=rng.choice(_DESCRIPTORS))
        else:  # pragma: no cover - templates are attribute-free; a test checks every product
            raise RuntimeError(f"could not write text for {asin} without leaking {_leaks(spec, product)}")
        products.append(product)
        attributes[asin] = ins_entry
        if human_entry:
            human[asin] = human_entry
        reviews.append(review_entry)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return {"products": products, "attributes": attributes, "human": human, "reviews": reviews,
            "roles": {p["asin"]: (s.role, s.family) for p, s in zip(products, specs)}}


def file_names(num_products: int) -> dict[str, str]:
    return {"products": f"items_shuffle_{num_products}.json", "attributes": f"items_ins_v2_{num_products}.json",
            "human": "items_human_ins.json", "reviews": "reviews.json"}


def write_catalogue(out_dir: str | Path, num_products: int, seed: int, progress: bool = True) -> Path:
    """Generate and write the catalogue files into ``out_dir`` (created); returns ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = generate_records(num_products, seed, progress=progress)
    names = file_names(num_products)
    for key in ("products", "attributes", "human", "reviews"):
        tmp = out / (names[key] + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(records[key], f, ensure_ascii=False)
        os.replace(tmp, out / names[key])
    with open(out / "generated.json", "w", encoding="utf-8") as f:
        json.dump({"generator_version": GENERATOR_VERSION, "num_products": num_products, "seed": seed,
                   "near_miss_roles": records["roles"]}, f)
    return out


def generated_dir(num_products: int, seed: int) -> Path:
    from envs.paths import cache_dir

    return cache_dir("webshop", create=False) / f"generated_v{GENERATOR_VERSION}_n{num_products}_seed{seed}"


def ensure_generated(num_products: int, seed: int) -> Path:
    """The cached catalogue folder, generated first if needed (one process generates; others wait)."""
    final = generated_dir(num_products, seed)
    if (final / "generated.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    lock_path = final.parent / f".{final.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (final / "generated.json").is_file():
            t0 = time.time()
            print(f"[webshop] generating a {num_products}-product catalogue (seed {seed}) into {final}",
                  file=sys.stderr)
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
            try:
                write_catalogue(tmp, num_products, seed, progress=True)
                if final.exists():
                    shutil.rmtree(final)
                os.replace(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            print(f"[webshop] done in {time.time() - t0:.1f} s", file=sys.stderr)
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.webshop.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-products", type=int, default=1000,
                        help=f"catalogue size, {MIN_PRODUCTS}..{MAX_PRODUCTS} (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--out", type=str, default=None,
                        help="output folder (default: the cache folder the environment reads)")
    args = parser.parse_args(argv)
    if not MIN_PRODUCTS <= args.num_products <= MAX_PRODUCTS:
        parser.error(f"--num-products {args.num_products} must lie in {MIN_PRODUCTS}..{MAX_PRODUCTS}")
    if args.out:
        out = write_catalogue(args.out, args.num_products, args.seed)
    else:
        out = ensure_generated(args.num_products, args.seed)
    names = file_names(args.num_products)
    print(f"wrote {', '.join(names.values())} to {out}")
    if args.out:
        print(f"use it with WEBSHOP_DATA={out} or WebShopEnv(data_dir='{out}')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
