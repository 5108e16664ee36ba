"""Vocabulary of the generated catalogue: product types, their attributes, option groups and prices.

Written for this repo (no product data is copied). Categories carry the official WebShop category names
(beauty, electronics, fashion, food, furniture) so that task families read the same on both data sets.
Every attribute pool and every non-size option group is checked by ``check_vocabulary`` so that near-miss
products stay near misses under the reward's fuzzy matching (no two pool entries match each other).
"""
from __future__ import annotations

from dataclasses import dataclass

from .text import fuzzy_token_set, normalize_color

__all__ = ["ProductType", "PRODUCT_TYPES", "CATEGORIES", "check_vocabulary"]


@dataclass(frozen=True)
class ProductType:
    key: str
    category: str
    query: str
    path: str
    title: str
    phrase: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...], int, int], ...]
    price: tuple[float, float]


_COLORS = ("black", "white", "navy", "grey", "red", "blue", "green", "beige", "pink", "purple")
_LETTER = ("x-small", "small", "medium", "large", "x-large", "xx-large")
_MEN_SHOE = ("7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12")
_WOMEN_SHOE = ("5", "6", "6.5", "7", "7.5", "8", "9", "10")

_C = "Clothing, Shoes & Jewelry"
_B = "Beauty & Personal Care"
_G = "Grocery & Gourmet Food"
_H = "Home & Kitchen"

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # ---------------------------------------------------------------------------------------- fashion
    ProductType("running_shoes", "fashion", "men's running shoes", f"{_C} › Men › Shoes › Athletic › Running",
                "Running Shoes", "running shoes for men",
                ("lightweight", "breathable mesh", "rubber sole", "arch support", "memory foam", "non slip",
                 "lace up"),
                (("size", _MEN_SHOE, 3, 7), ("color", _COLORS, 2, 4)), (35, 120)),
    ProductType("tshirt", "fashion", "men's t-shirt", f"{_C} › Men › Clothing › Shirts › T-Shirts",
                "T-Shirt", "t-shirt for men",
                ("cotton", "short sleeve", "machine wash", "slim fit", "moisture wicking", "crew neck", "tagless"),
                (("size", _LETTER, 3, 6), ("color", _COLORS, 2, 5)), (9, 35)),
    ProductType("dress", "fashion", "women's casual dress", f"{_C} › Women › Clothing › Dresses › Casual",
                "Casual Dress", "casual dress for women",
                ("long sleeve", "elastic waist", "polyester spandex", "button closure", "hand wash", "pockets",
                 "v neck"),
                (("size", _LETTER, 3, 6), ("color", _COLORS, 2, 4)), (20, 70)),
    ProductType("yoga_pants", "fashion", "women's yoga pants", f"{_C} › Women › Clothing › Active › Leggings",
                "Yoga Pants", "yoga pants for women",
                ("high waist", "tummy control", "four way stretch", "squat proof", "side pockets", "quick drying"),
                (("size", _LETTER, 3, 6), ("color", _COLORS, 2, 4)), (15, 45)),
    ProductType("hoodie", "fashion", "men's pullover hoodie",
                f"{_C} › Men › Clothing › Fashion Hoodies & Sweatshirts", "Pullover Hoodie", "pullover hoodie for men",
                ("fleece lined", "drawstring hood", "kangaroo pocket", "cotton blend", "zip up", "ribbed cuffs"),
                (("size", _LETTER, 3, 6), ("color", _COLORS, 2, 4)), (20, 60)),
    ProductType("sandals", "fashion", "women's flat sandals", f"{_C} › Women › Shoes › Sandals › Flat Sandals",
                "Flat Sandals", "flat sandals for women",
                ("open toe", "ankle strap", "cushioned footbed", "rubber outsole", "adjustable buckle",
                 "faux leather"),
                (("size", _WOMEN_SHOE, 3, 6), ("color", _COLORS, 2, 4)), (18, 60)),
    ProductType("socks", "fashion", "athletic crew socks", f"{_C} › Men › Clothing › Socks › Athletic Socks",
                "Athletic Crew Socks", "athletic crew socks",
                ("cushioned sole", "moisture control", "reinforced heel", "arch compression", "odor resistant"),
                (("size", ("small", "medium", "large", "x-large"), 2, 4), ("color", _COLORS, 2, 3)), (8, 30)),
    # ----------------------------------------------------------------------------------------- beauty
    ProductType("shampoo", "beauty", "shampoo", f"{_B} › Hair Care › Shampoo & Conditioner › Shampoos",
                "Shampoo", "shampoo",
                ("sulfate free", "paraben free", "dry hair", "hair growth", "tea tree oil", "color treated hair",
                 "cruelty free"),
                (("size", ("8.5 fl oz", "12 fl oz", "16.9 fl oz", "33.8 fl oz"), 2, 4),
                 ("scent", ("lavender", "coconut", "citrus", "unscented", "eucalyptus"), 1, 3)), (7, 40)),
    ProductType("face_serum", "beauty", "face serum", f"{_B} › Skin Care › Face › Serums", "Face Serum",
                "face serum",
                ("anti aging", "hyaluronic acid", "vitamin c", "fine lines", "dark spots", "fragrance free",
                 "sensitive skin"),
                (("size", ("0.5 fl oz", "1 fl oz", "1.7 fl oz", "2 fl oz"), 2, 4),), (12, 60)),
    ProductType("lipstick", "beauty", "matte lipstick", f"{_B} › Makeup › Lips › Lipstick", "Matte Lipstick",
                "lipstick",
                ("long lasting", "cruelty free", "paraben free", "highly pigmented", "moisturizing formula",
                 "transfer proof"),
                (("color", ("red", "pink", "nude", "coral", "plum", "burgundy", "mauve"), 3, 6),), (6, 30)),
    ProductType("hair_dryer", "beauty", "hair dryer",
                f"{_B} › Hair Care › Styling Tools & Appliances › Hair Dryers & Accessories › Hair Dryers",
                "Hair Dryer", "hair dryer",
                ("ionic technology", "low noise", "fast drying", "diffuser attachment", "cool shot button",
                 "foldable handle"),
                (("color", ("black", "white", "pink", "purple", "silver"), 2, 4),), (20, 120)),
    ProductType("deodorant", "beauty", "natural deodorant",
                f"{_B} › Personal Care › Deodorants & Antiperspirants › Deodorants", "Deodorant Stick",
                "deodorant stick",
                ("aluminum free", "sensitive skin", "long lasting", "baking soda free", "vegan formula",
                 "clinically tested"),
                (("scent", ("citrus", "lavender", "unscented", "cedarwood", "fresh rain"), 2, 4),
                 ("size", ("2.65 ounce", "3 ounce", "pack of 2", "pack of 3"), 1, 3)), (5, 25)),
    ProductType("nail_polish", "beauty", "nail polish",
                f"{_B} › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish", "Nail Polish", "nail polish",
                ("quick dry", "chip resistant", "high gloss", "non toxic", "gel effect", "long wear"),
                (("color", ("red", "pink", "nude", "coral", "purple", "black", "teal", "gold"), 3, 6),), (4, 20)),
    ProductType("body_lotion", "beauty", "body lotion", f"{_B} › Skin Care › Body › Moisturizers › Lotions",
                "Body Lotion", "body lotion",
                ("shea butter", "dry skin", "non greasy", "fragrance free", "dermatologist tested",
                 "fast absorbing"),
                (("size", ("8 fl oz", "13.5 fl oz", "16 fl oz", "32 fl oz"), 2, 4),
                 ("scent", ("lavender", "coconut", "vanilla", "unscented"), 1, 3)), (6, 30)),
    # ------------------------------------------------------------------------------------------- food
    ProductType("green_tea", "food", "green tea bags",
                f"{_G} › Beverages › Coffee, Tea & Cocoa › Tea › Green", "Green Tea Bags", "green tea bags",
                ("organic", "non gmo", "gluten free", "individually wrapped", "low calorie", "kosher certified"),
                (("flavor name", ("jasmine", "mint", "lemon", "original", "ginger", "honey"), 2, 4),
                 ("size", ("20 count", "40 count", "100 count"), 1, 3)), (5, 30)),
    ProductType("ground_coffee", "food", "ground coffee",
                f"{_G} › Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee", "Ground Coffee",
                "ground coffee",
                ("fair trade", "organic", "arabica beans", "low acid", "kosher certified", "small batch roasted"),
                (("flavor name", ("dark roast", "medium roast", "light roast", "french vanilla", "hazelnut"), 2, 4),
                 ("size", ("12 ounce", "24 ounce", "2 pound"), 1, 3)), (8, 35)),
    ProductType("protein_bars", "food", "protein bars", f"{_G} › Snack Foods › Bars › Protein Bars",
                "Protein Bars", "protein bars",
                ("gluten free", "low sugar", "high protein", "keto friendly", "non gmo", "plant based"),
                (("flavor name", ("chocolate", "peanut butter", "vanilla", "cookies and cream", "strawberry",
                                  "caramel"), 2, 4),
                 ("size", ("12 count", "15 count", "24 count"), 1, 3)), (10, 40)),
    ProductType("potato_chips", "food", "kettle potato chips", f"{_G} › Snack Foods › Chips & Crisps › Potato",
                "Kettle Potato Chips", "kettle potato chips",
                ("gluten free", "non gmo", "no artificial flavors", "low sodium", "vegan", "whole grain"),
                (("flavor name", ("sea salt", "barbecue", "sour cream and onion", "jalapeno", "salt and vinegar"),
                  2, 4),
                 ("size", ("1 ounce (pack of 24)", "5 ounce", "8 ounce"), 1, 3)), (4, 30)),
    ProductType("dark_chocolate", "food", "dark chocolate bar",
                f"{_G} › Candy & Chocolate › Chocolate › Chocolate Bars", "Dark Chocolate Bar", "dark chocolate bar",
                ("fair trade", "organic", "dairy free", "no sugar added", "single origin", "gluten free"),
                (("flavor name", ("sea salt", "almond", "raspberry", "mint", "orange"), 2, 4),
                 ("size", ("3.5 ounce", "pack of 4", "pack of 12"), 1, 3)), (4, 30)),
    ProductType("olive_oil", "food", "extra virgin olive oil", f"{_G} › Pantry Staples › Cooking Oils › Olive",
                "Olive Oil", "olive oil",
                ("extra virgin", "cold pressed", "first harvest", "non gmo", "kosher certified", "glass bottle"),
                (("size", ("500 ml", "750 ml", "1 liter", "3 liter"), 2, 4),), (9, 45)),
    ProductType("beef_jerky", "food", "beef jerky", f"{_G} › Meat & Seafood › Jerky", "Beef Jerky", "beef jerky",
                ("high protein", "low fat", "grass fed", "gluten free", "no preservatives", "keto friendly"),
                (("flavor name", ("original", "teriyaki", "peppered", "sweet and spicy", "smoked"), 2, 4),
                 ("size", ("2.85 ounce", "8 ounce", "pack of 3"), 1, 3)), (7, 35)),
    # ------------------------------------------------------------------------------------ electronics
    ProductType("earbuds", "electronics", "wireless earbuds",
                "Electronics › Headphones, Earbuds & Accessories › Headphones & Earbuds › Earbud Headphones",
                "Wireless Earbuds", "wireless earbuds",
                ("noise cancelling", "water resistant", "charging case", "touch control", "hands free calling",
                 "long battery life"),
                (("color", ("black", "white", "blue", "pink", "green", "grey"), 2, 4),), (20, 150)),
    ProductType("phone_case", "electronics", "phone case",
                "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases", "Phone Case", "phone case",
                ("shockproof", "wireless charging compatible", "raised edges", "slim design", "scratch resistant",
                 "kickstand"),
                (("style", ("iphone 14", "galaxy s23", "pixel 8", "moto g"), 2, 4),
                 ("color", ("black", "clear", "blue", "pink", "purple", "green"), 2, 4)), (8, 40)),
    ProductType("usb_cable", "electronics", "usb c cable",
                "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Cables & Accessories"
                " › USB Cables", "USB C Cable", "usb c charging cable",
                ("fast charging", "braided nylon", "high speed data", "durable connectors", "tangle free"),
                (("size", ("3 ft", "6 ft", "10 ft", "pack of 3"), 2, 4),
                 ("color", ("black", "white", "red", "grey", "blue"), 1, 3)), (6, 25)),
    ProductType("bt_speaker", "electronics", "bluetooth speaker",
                "Electronics › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
                "Bluetooth Speaker", "portable bluetooth speaker",
                ("waterproof", "deep bass", "built in microphone", "stereo pairing", "24 hour playtime",
                 "usb charging"),
                (("color", ("black", "blue", "red", "green", "grey"), 2, 4),), (20, 150)),
    ProductType("power_bank", "electronics", "portable power bank",
                "Electronics › Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
                "Portable Charger Power Bank", "portable power bank",
                ("fast charging", "led display", "dual usb ports", "compact design", "airline safe"),
                (("size", ("10000mah", "20000mah", "26800mah"), 2, 3),
                 ("color", ("black", "white", "blue", "pink"), 1, 3)), (15, 60)),
    ProductType("hdmi_cable", "electronics", "hdmi cable",
                "Electronics › Television & Video › Accessories › Cables › HDMI Cables", "HDMI Cable", "hdmi cable",
                ("high speed", "gold plated", "4k support", "ethernet channel", "braided cord"),
                (("size", ("3 feet", "6 feet", "10 feet", "15 feet"), 2, 4),), (6, 30)),
    ProductType("webcam", "electronics", "hd webcam",
                "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Webcams",
                "HD Webcam", "hd webcam",
                ("1080p resolution", "built in microphone", "auto focus", "privacy cover", "plug and play",
                 "wide angle"),
                (("color", ("black", "white", "silver"), 2, 3),), (25, 90)),
    # -------------------------------------------------------------------------------------- furniture
    ProductType("office_chair", "furniture", "office chair",
                f"{_H} › Furniture › Home Office Furniture › Home Office Chairs › Home Office Desk Chairs",
                "Office Chair", "office chair",
                ("lumbar support", "height adjustable", "breathable mesh back", "easy assembly", "swivel wheels",
                 "padded armrests"),
                (("color", ("black", "grey", "white", "blue", "pink"), 2, 4),), (60, 300)),
    ProductType("bookshelf", "furniture", "bookshelf", f"{_H} › Furniture › Living Room Furniture › Bookcases",
                "Bookshelf", "bookshelf",
                ("easy assembly", "engineered wood", "space saving", "anti tip kit", "open storage"),
                (("color", ("white", "black", "walnut", "rustic brown"), 2, 4),
                 ("size", ("3 tier", "4 tier", "5 tier"), 1, 3)), (35, 200)),
    ProductType("pillow_covers", "furniture", "throw pillow covers",
                f"{_H} › Bedding › Decorative Pillows, Inserts & Covers › Throw Pillow Covers", "Throw Pillow Covers",
                "throw pillow covers",
                ("hidden zipper", "soft velvet", "machine washable", "double sided", "set of 2"),
                (("size", ("16 x 16 inch", "18 x 18 inch", "20 x 20 inch"), 2, 3),
                 ("color", ("navy", "beige", "grey", "green", "pink", "mustard"), 2, 4)), (9, 30)),
    ProductType("bed_sheets", "furniture", "bed sheet set",
                f"{_H} › Bedding › Sheets & Pillowcases › Sheet & Pillowcase Sets", "Bed Sheet Set", "bed sheet set",
                ("deep pocket", "wrinkle free", "microfiber", "breathable cooling", "fade resistant",
                 "egyptian cotton"),
                (("size", ("twin", "full", "queen", "king", "california king"), 2, 5),
                 ("color", ("white", "grey", "navy", "beige", "blue"), 2, 4)), (20, 90)),
    ProductType("coffee_table", "furniture", "coffee table",
                f"{_H} › Furniture › Living Room Furniture › Tables › Coffee Tables", "Coffee Table",
                "coffee table for living room",
                ("lift top", "storage shelf", "metal frame", "easy assembly", "solid wood", "round shape"),
                (("color", ("walnut", "black", "white", "grey"), 2, 4),), (50, 250)),
    ProductType("tv_stand", "furniture", "tv stand",
                f"{_H} › Furniture › Living Room Furniture › Television Stands & Entertainment Centers", "TV Stand",
                "tv stand",
                ("cable management", "open shelves", "led lights", "easy assembly", "engineered wood",
                 "storage cabinet"),
                (("color", ("black", "white", "walnut", "grey"), 2, 4), ("size", ("55 inch", "65 inch", "70 inch"),
                                                                           1, 3)), (70, 300)),
    ProductType("curtains", "furniture", "blackout curtains",
                f"{_H} › Home Decor › Window Treatments › Curtains & Drapes › Panels", "Blackout Curtains",
                "blackout curtains",
                ("thermal insulated", "noise reducing", "grommet top", "machine washable", "light blocking"),
                (("size", ("42 x 63 inch", "52 x 84 inch", "52 x 95 inch"), 2, 3),
                 ("color", ("navy", "grey", "beige", "black", "white", "teal"), 2, 4)), (15, 60)),
)

CATEGORIES: tuple[str, ...] = tuple(sorted({t.category for t in PRODUCT_TYPES}))


def check_vocabulary(threshold: int = 85) -> list[str]:
    """Problems that would let a near-miss product match a goal it must miss (empty list = none).

    * two attributes of one type's pool match each other (fuzzy ratio > threshold, or one contains the other);
    * two values of one non-size option group match after colour normalisation;
    * a value appears in two groups of one type (clicks would be ambiguous);
    * the type's title contains an attribute of its pool.
    """
    problems: list[str] = []
    for t in PRODUCT_TYPES:
        pool = t.attributes
        for i, a in enumerate(pool):
            for b in pool[i + 1:]:
                if fuzzy_token_set(a, b) > threshold or a in b or b in a:
                    problems.append(f"{t.key}: attributes {a!r} and {b!r} match")
            if a in t.title.lower():
                problems.append(f"{t.key}: title {t.title!r} contains attribute {a!r}")
        seen: dict[str, str] = {}
        for name, values, lo, hi in t.options:
            if not 1 <= lo <= hi <= len(values):
                problems.append(f"{t.key}: option group {name!r} bounds {lo}..{hi} do not fit {len(values)} values")
            if len(set(values)) != len(values):
                problems.append(f"{t.key}: option group {name!r} repeats a value")
            for v in values:
                if v in seen:
                    problems.append(f"{t.key}: value {v!r} in groups {seen[v]!r} and {name!r}")
                seen[v] = name
            if "size" in name:
                continue
            for i, a in enumerate(values):
                for b in values[i + 1:]:
                    if fuzzy_token_set(normalize_color(a), normalize_color(b)) > threshold:
                        problems.append(f"{t.key}: {name} values {a!r} and {b!r} match after normalisation")
    return problems
