"""Build data/food/kg.json: a food-and-cooking knowledge graph (dishes, their ingredients and
countries of origin, preparation techniques, what ingredients are made from, the nutrients they
are a source of, what those nutrients do in the body and where).

The facts live in the plain tables below, written with labels; ids are derived from labels
(CamelCase ASCII). Running the script writes the JSON deterministically (entities sorted by
type then id, edges by source, relation, target) in the same layout as data/kg.json, then
checks the graph and prints its numbers:

    .venv/bin/python data/food/build_kg.py

Facts are the common, textbook kind: a dish's characteristic ingredients (not a full recipe),
"is a source of" for nutrients an ingredient provides in useful amounts per 100 g (roughly the
EU "source of" threshold of 15% of the reference intake, or a well-known dietary source),
"supports" for the body functions a nutrition textbook (or an authorised EU health claim)
credits a nutrient with. Dishes whose country of origin is disputed are left out.

Nine relations, none the inverse of another. Nothing points back at dishes, so chains run
dish -> country -> staple food -> (made from ->) nutrient -> (aids absorption ->) body function
-> body part; "originates from" is functional, the others branch. Continents and equipment were
left out to stay within nine relations: as dead ends they would only add 1-2 hop chains, while
"has staple food" and "aids absorption of" make the long (4-5 hop) chains.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parent / "kg.json"

# --------------------------------------------------------------------------- relations
# id -> (label, source type, target type). Each label reads after "It" and after "which".
RELATIONS = {
    "has_ingredient": ("has ingredient", "dish", "ingredient"),
    "originates_from": ("originates from", "dish", "country"),
    "prepared_by": ("is prepared by", "dish", "technique"),
    "staple_food": ("has staple food", "country", "ingredient"),
    "made_from": ("is made from", "ingredient", "ingredient"),
    "source_of": ("is a source of", "ingredient", "nutrient"),
    "aids_absorption": ("aids absorption of", "nutrient", "nutrient"),
    "supports": ("supports", "nutrient", "body function"),
    "involves": ("involves", "body function", "body part"),
}

# --------------------------------------------------------------------------- dishes
# label: (country of origin, characteristic ingredients, preparation techniques)
DISHES = {
    # Spain
    "paella": ("Spain", ["short-grain rice", "saffron", "chicken", "green beans"], ["simmering"]),
    "gazpacho": ("Spain", ["tomato", "cucumber", "bell pepper", "olive oil"], ["blending"]),
    "Spanish omelette": ("Spain", ["potato", "eggs", "onion", "olive oil"], ["pan-frying"]),
    "churros": ("Spain", ["wheat flour", "sugar", "vegetable oil"], ["deep-frying"]),
    "pulpo a la gallega": ("Spain", ["octopus", "paprika", "olive oil", "potato"], ["boiling"]),
    # Italy
    "pizza margherita": ("Italy", ["wheat flour", "tomato", "mozzarella", "basil"], ["baking"]),
    "risotto": ("Italy", ["arborio rice", "parmesan", "butter", "onion"], ["stirring", "simmering"]),
    "carbonara": ("Italy", ["spaghetti", "guanciale", "eggs", "pecorino romano"], ["boiling"]),
    "lasagne": ("Italy", ["pasta", "beef", "tomato", "bechamel sauce"], ["simmering", "baking"]),
    "tiramisu": ("Italy", ["mascarpone", "ladyfingers", "coffee", "cocoa powder"], ["whisking"]),
    "minestrone": ("Italy", ["tomato", "cannellini beans", "carrot", "celery"], ["simmering"]),
    "bruschetta": ("Italy", ["bread", "tomato", "garlic", "olive oil"], ["grilling"]),
    "osso buco": ("Italy", ["veal", "white wine", "carrot", "celery"], ["braising"]),
    "polenta": ("Italy", ["cornmeal", "butter", "parmesan"], ["stirring"]),
    "caprese salad": ("Italy", ["mozzarella", "tomato", "basil", "olive oil"], []),
    # Greece
    "moussaka": ("Greece", ["aubergine", "lamb", "tomato", "bechamel sauce"], ["pan-frying", "baking"]),
    "Greek salad": ("Greece", ["tomato", "cucumber", "feta", "olives"], []),
    "spanakopita": ("Greece", ["spinach", "feta", "filo pastry", "eggs"], ["baking"]),
    "souvlaki": ("Greece", ["pork", "lemon", "oregano", "olive oil"], ["grilling"]),
    "avgolemono": ("Greece", ["eggs", "lemon", "chicken stock", "rice"], ["simmering"]),
    # France
    "ratatouille": ("France", ["aubergine", "courgette", "bell pepper", "tomato"], ["stewing"]),
    "coq au vin": ("France", ["chicken", "red wine", "mushrooms", "bacon"], ["braising"]),
    "boeuf bourguignon": ("France", ["beef", "red wine", "mushrooms", "carrot"], ["braising"]),
    "bouillabaisse": ("France", ["white fish", "saffron", "fennel", "tomato"], ["simmering"]),
    "quiche lorraine": ("France", ["eggs", "cream", "bacon", "shortcrust pastry"], ["baking"]),
    "crepes": ("France", ["wheat flour", "eggs", "milk", "butter"], ["pan-frying"]),
    "French onion soup": ("France", ["onion", "beef stock", "bread", "gruyere"], ["simmering", "grilling"]),
    "croque monsieur": ("France", ["bread", "ham", "gruyere", "bechamel sauce"], ["grilling"]),
    "chocolate mousse": ("France", ["dark chocolate", "eggs", "sugar"], ["whisking"]),
    "salade nicoise": ("France", ["tuna", "eggs", "olives", "green beans"], []),
    # Portugal
    "pastel de nata": ("Portugal", ["puff pastry", "eggs", "sugar", "milk"], ["baking"]),
    "caldo verde": ("Portugal", ["kale", "potato", "chorizo", "olive oil"], ["simmering"]),
    "pasteis de bacalhau": ("Portugal", ["salt cod", "potato", "eggs", "parsley"], ["deep-frying"]),
    # United Kingdom and Ireland
    "fish and chips": ("United Kingdom", ["cod", "potato", "wheat flour"], ["deep-frying"]),
    "shepherd's pie": ("United Kingdom", ["lamb", "potato", "onion", "carrot"], ["baking"]),
    "Yorkshire pudding": ("United Kingdom", ["eggs", "wheat flour", "milk"], ["baking"]),
    "Cornish pasty": ("United Kingdom", ["beef", "potato", "swede", "shortcrust pastry"], ["baking"]),
    "scones": ("United Kingdom", ["wheat flour", "butter", "milk"], ["baking"]),
    "Eton mess": ("United Kingdom", ["strawberries", "cream", "meringue"], ["whisking"]),
    "Scotch eggs": ("United Kingdom", ["eggs", "pork", "breadcrumbs"], ["boiling", "deep-frying"]),
    "Irish stew": ("Ireland", ["lamb", "potato", "onion", "thyme"], ["stewing"]),
    "colcannon": ("Ireland", ["potato", "cabbage", "butter", "milk"], ["boiling", "mashing"]),
    "soda bread": ("Ireland", ["wheat flour", "buttermilk", "bicarbonate of soda", "salt"], ["baking"]),
    "boxty": ("Ireland", ["potato", "wheat flour", "buttermilk"], ["pan-frying"]),
    # Central and northern Europe
    "sauerbraten": ("Germany", ["beef", "red wine vinegar", "onion", "juniper berries"], ["marinating", "braising"]),
    "Black Forest gateau": ("Germany", ["cherries", "cream", "cocoa powder", "kirsch"], ["baking"]),
    "spaetzle": ("Germany", ["wheat flour", "eggs"], ["boiling"]),
    "currywurst": ("Germany", ["pork", "ketchup", "curry powder"], ["grilling"]),
    "Wiener schnitzel": ("Austria", ["veal", "breadcrumbs", "eggs", "wheat flour"], ["pan-frying"]),
    "apple strudel": ("Austria", ["apple", "raisins", "cinnamon", "wheat flour"], ["baking"]),
    "Sachertorte": ("Austria", ["dark chocolate", "apricot jam", "eggs", "butter"], ["baking"]),
    "goulash": ("Hungary", ["beef", "paprika", "onion", "potato"], ["stewing"]),
    "chicken paprikash": ("Hungary", ["chicken", "paprika", "onion", "sour cream"], ["stewing"]),
    "pierogi": ("Poland", ["wheat flour", "potato", "quark", "onion"], ["boiling"]),
    "bigos": ("Poland", ["sauerkraut", "cabbage", "pork", "mushrooms"], ["stewing"]),
    "cheese fondue": ("Switzerland", ["gruyere", "emmental", "white wine", "garlic"], ["melting"]),
    "rosti": ("Switzerland", ["potato", "butter"], ["pan-frying"]),
    "bircher muesli": ("Switzerland", ["oats", "apple", "milk", "lemon"], []),
    "Swedish meatballs": ("Sweden", ["beef", "pork", "breadcrumbs", "onion"], ["pan-frying"]),
    "cinnamon buns": ("Sweden", ["wheat flour", "cinnamon", "butter", "sugar"], ["baking"]),
    "Jansson's temptation": ("Sweden", ["potato", "sprats", "onion", "cream"], ["baking"]),
    "stamppot": ("Netherlands", ["potato", "kale", "smoked sausage"], ["boiling", "mashing"]),
    "Dutch pea soup": ("Netherlands", ["split peas", "pork", "smoked sausage", "celery"], ["simmering"]),
    "moules-frites": ("Belgium", ["mussels", "potato", "white wine", "celery"], ["steaming", "deep-frying"]),
    "Flemish stew": ("Belgium", ["beef", "beer", "onion"], ["stewing"]),
    # North America and the Caribbean
    "hamburger": ("United States", ["beef", "burger bun", "lettuce", "tomato"], ["grilling"]),
    "New England clam chowder": ("United States", ["clams", "potato", "cream", "onion"], ["simmering"]),
    "buffalo wings": ("United States", ["chicken", "hot sauce", "butter"], ["deep-frying"]),
    "cornbread": ("United States", ["cornmeal", "buttermilk", "eggs"], ["baking"]),
    "gumbo": ("United States", ["okra", "chicken", "smoked sausage", "celery"], ["simmering"]),
    "pecan pie": ("United States", ["pecans", "eggs", "sugar", "butter"], ["baking"]),
    "jambalaya": ("United States", ["rice", "chicken", "smoked sausage", "bell pepper"], ["simmering"]),
    "poke": ("United States", ["tuna", "soy sauce", "sesame oil", "onion"], ["marinating"]),
    "brownies": ("United States", ["dark chocolate", "butter", "sugar", "eggs"], ["baking"]),
    "poutine": ("Canada", ["potato", "cheese curds", "gravy"], ["deep-frying"]),
    "tourtiere": ("Canada", ["pork", "shortcrust pastry", "onion", "potato"], ["baking"]),
    "butter tarts": ("Canada", ["butter", "sugar", "eggs", "shortcrust pastry"], ["baking"]),
    "tacos al pastor": ("Mexico", ["pork", "pineapple", "corn tortilla", "onion"], ["marinating", "roasting"]),
    "guacamole": ("Mexico", ["avocado", "lime", "onion", "chili pepper"], ["mashing"]),
    "mole poblano": ("Mexico", ["chili pepper", "dark chocolate", "sesame seeds", "turkey"], ["grinding", "simmering"]),
    "enchiladas": ("Mexico", ["corn tortilla", "chicken", "chili pepper", "onion"], ["baking"]),
    "tamales": ("Mexico", ["masa harina", "lard", "pork"], ["steaming"]),
    "pozole": ("Mexico", ["hominy", "pork", "chili pepper"], ["simmering"]),
    "chiles en nogada": ("Mexico", ["poblano pepper", "walnuts", "pomegranate", "pork"], ["roasting"]),
    "Caesar salad": ("Mexico", ["lettuce", "parmesan", "bread", "eggs"], []),
    "huevos rancheros": ("Mexico", ["eggs", "corn tortilla", "tomato", "chili pepper"], ["pan-frying"]),
    "jerk chicken": ("Jamaica", ["chicken", "allspice", "scotch bonnet", "thyme"], ["marinating", "grilling"]),
    "ackee and saltfish": ("Jamaica", ["ackee", "salt cod", "onion", "tomato"], ["pan-frying"]),
    # South America
    "ceviche": ("Peru", ["white fish", "lime", "red onion", "chili pepper"], ["marinating"]),
    "lomo saltado": ("Peru", ["beef", "soy sauce", "tomato", "potato"], ["stir-frying"]),
    "feijoada": ("Brazil", ["black beans", "pork", "smoked sausage", "bacon"], ["stewing"]),
    "Brazilian cheese bread": ("Brazil", ["tapioca flour", "eggs", "milk", "parmesan"], ["baking"]),
    "brigadeiro": ("Brazil", ["condensed milk", "cocoa powder", "butter"], ["stirring"]),
    "moqueca": ("Brazil", ["white fish", "coconut milk", "tomato", "palm oil"], ["stewing"]),
    "provoleta": ("Argentina", ["provolone", "oregano", "olive oil"], ["grilling"]),
    # Africa
    "tagine": ("Morocco", ["lamb", "dried apricots", "almonds", "cinnamon"], ["stewing"]),
    "harira": ("Morocco", ["lentils", "chickpeas", "tomato", "lamb"], ["simmering"]),
    "pastilla": ("Morocco", ["chicken", "almonds", "filo pastry", "cinnamon"], ["baking"]),
    "koshari": ("Egypt", ["rice", "lentils", "pasta", "chickpeas"], ["boiling"]),
    "ful medames": ("Egypt", ["fava beans", "cumin", "olive oil", "garlic"], ["stewing"]),
    "brik": ("Tunisia", ["filo pastry", "eggs", "tuna", "capers"], ["deep-frying"]),
    "lablabi": ("Tunisia", ["chickpeas", "cumin", "garlic", "bread"], ["simmering"]),
    "doro wat": ("Ethiopia", ["chicken", "berbere", "onion", "eggs"], ["stewing"]),
    "injera": ("Ethiopia", ["teff"], ["fermenting", "griddling"]),
    "misir wat": ("Ethiopia", ["lentils", "berbere", "onion"], ["stewing"]),
    "thieboudienne": ("Senegal", ["white fish", "rice", "tomato paste", "cassava"], ["simmering"]),
    "chicken yassa": ("Senegal", ["chicken", "onion", "lemon", "mustard"], ["marinating", "grilling"]),
    "kelewele": ("Ghana", ["plantain", "ginger", "chili pepper"], ["deep-frying"]),
    "waakye": ("Ghana", ["rice", "black-eyed peas"], ["boiling"]),
    "suya": ("Nigeria", ["beef", "peanuts", "chili pepper", "ginger"], ["grilling"]),
    "moi moi": ("Nigeria", ["black-eyed peas", "bell pepper", "onion"], ["steaming"]),
    "bobotie": ("South Africa", ["beef", "curry powder", "eggs", "raisins"], ["baking"]),
    "biltong": ("South Africa", ["beef", "vinegar", "coriander seeds", "salt"], ["curing"]),
    "malva pudding": ("South Africa", ["apricot jam", "wheat flour", "butter", "sugar"], ["baking"]),
    # Western and southern Asia
    "mansaf": ("Jordan", ["lamb", "jameed", "rice"], ["simmering"]),
    "ghormeh sabzi": ("Iran", ["lamb", "kidney beans", "parsley", "fenugreek"], ["stewing"]),
    "tahdig": ("Iran", ["rice", "saffron", "butter"], ["pan-frying"]),
    "fesenjan": ("Iran", ["walnuts", "pomegranate molasses", "chicken", "onion"], ["stewing"]),
    "butter chicken": ("India", ["chicken", "butter", "tomato", "cream"], ["marinating", "simmering"]),
    "palak paneer": ("India", ["spinach", "paneer", "onion", "garlic"], ["blending", "simmering"]),
    "chana masala": ("India", ["chickpeas", "tomato", "onion", "ginger"], ["simmering"]),
    "dal tadka": ("India", ["lentils", "cumin", "ghee", "garlic"], ["boiling", "tempering"]),
    "masala dosa": ("India", ["rice", "black gram", "potato", "mustard seeds"], ["fermenting", "griddling"]),
    "aloo gobi": ("India", ["potato", "cauliflower", "turmeric", "cumin"], ["pan-frying"]),
    "kheer": ("India", ["rice", "milk", "sugar", "cardamom"], ["simmering"]),
    "raita": ("India", ["yoghurt", "cucumber", "cumin", "mint"], []),
    # East Asia
    "Peking duck": ("China", ["duck", "hoisin sauce", "spring onion", "cucumber"], ["roasting"]),
    "kung pao chicken": ("China", ["chicken", "peanuts", "Sichuan pepper", "chili pepper"], ["stir-frying"]),
    "mapo tofu": ("China", ["tofu", "pork", "doubanjiang", "Sichuan pepper"], ["braising"]),
    "egg fried rice": ("China", ["rice", "eggs", "spring onion", "soy sauce"], ["stir-frying"]),
    "char siu": ("China", ["pork", "honey", "hoisin sauce", "soy sauce"], ["marinating", "roasting"]),
    "xiaolongbao": ("China", ["wheat flour", "pork", "ginger"], ["steaming"]),
    "jiaozi": ("China", ["wheat flour", "pork", "napa cabbage"], ["boiling"]),
    "dan dan noodles": ("China", ["wheat noodles", "pork", "Sichuan pepper", "chili oil"], ["boiling"]),
    "sweet and sour pork": ("China", ["pork", "pineapple", "bell pepper", "rice vinegar"], ["deep-frying", "stir-frying"]),
    "sushi": ("Japan", ["short-grain rice", "rice vinegar", "nori", "tuna"], []),
    "ramen": ("Japan", ["wheat noodles", "pork", "eggs", "nori"], ["simmering", "boiling"]),
    "tempura": ("Japan", ["prawns", "wheat flour", "eggs"], ["deep-frying"]),
    "miso soup": ("Japan", ["miso", "tofu", "dashi", "wakame"], ["simmering"]),
    "teriyaki chicken": ("Japan", ["chicken", "soy sauce", "mirin", "sugar"], ["grilling"]),
    "okonomiyaki": ("Japan", ["cabbage", "wheat flour", "eggs", "pork"], ["griddling"]),
    "tonkatsu": ("Japan", ["pork", "panko", "eggs", "wheat flour"], ["deep-frying"]),
    "sukiyaki": ("Japan", ["beef", "tofu", "soy sauce", "spring onion"], ["simmering"]),
    "onigiri": ("Japan", ["short-grain rice", "nori", "salt"], []),
    "kimchi": ("Korea", ["napa cabbage", "chili pepper", "garlic", "fish sauce"], ["fermenting"]),
    "bibimbap": ("Korea", ["rice", "gochujang", "eggs", "spinach"], []),
    "bulgogi": ("Korea", ["beef", "soy sauce", "sesame oil", "pear"], ["marinating", "grilling"]),
    "japchae": ("Korea", ["glass noodles", "spinach", "beef", "sesame oil"], ["boiling", "stir-frying"]),
    "tteokbokki": ("Korea", ["rice cakes", "gochujang", "spring onion"], ["simmering"]),
    # South-east Asia
    "pad thai": ("Thailand", ["rice noodles", "prawns", "peanuts", "tamarind"], ["stir-frying"]),
    "tom yum": ("Thailand", ["prawns", "lemongrass", "galangal", "makrut lime leaves"], ["boiling"]),
    "Thai green curry": ("Thailand", ["coconut milk", "green curry paste", "chicken", "Thai basil"], ["simmering"]),
    "mango sticky rice": ("Thailand", ["mango", "glutinous rice", "coconut milk"], ["steaming"]),
    "massaman curry": ("Thailand", ["beef", "potato", "peanuts", "coconut milk"], ["simmering"]),
    "pho": ("Vietnam", ["rice noodles", "beef", "star anise", "ginger"], ["simmering"]),
    "banh mi": ("Vietnam", ["baguette", "pork", "carrot", "daikon"], ["pickling"]),
    "summer rolls": ("Vietnam", ["rice paper", "prawns", "rice noodles", "lettuce"], []),
    "bun cha": ("Vietnam", ["pork", "rice noodles", "fish sauce", "lettuce"], ["grilling"]),
    "nasi goreng": ("Indonesia", ["rice", "kecap manis", "eggs", "shallots"], ["stir-frying"]),
    "rendang": ("Indonesia", ["beef", "coconut milk", "lemongrass", "chili pepper"], ["stewing"]),
    "gado-gado": ("Indonesia", ["peanuts", "tofu", "tempeh", "bean sprouts"], ["boiling"]),
    "chicken adobo": ("Philippines", ["chicken", "soy sauce", "vinegar", "garlic"], ["marinating", "braising"]),
    "sinigang": ("Philippines", ["pork", "tamarind", "tomato", "daikon"], ["simmering"]),
    "nasi lemak": ("Malaysia", ["rice", "coconut milk", "anchovies", "peanuts"], ["steaming"]),
    "chili crab": ("Singapore", ["crab", "chili pepper", "tomato", "eggs"], ["stir-frying"]),
    # Oceania
    "lamington": ("Australia", ["wheat flour", "eggs", "cocoa powder", "desiccated coconut"], ["baking"]),
    "hangi": ("New Zealand", ["lamb", "pork", "sweet potato", "potato"], ["pit cooking"]),
    "kokoda": ("Fiji", ["white fish", "coconut milk", "lime", "chili pepper"], ["marinating"]),
}

# --------------------------------------------------------------------------- ingredients
# label: (nutrients it is a source of, ingredients it is made from)
INGREDIENTS = {
    # grains and grain products
    "rice": (["carbohydrate"], []),
    "short-grain rice": (["carbohydrate"], []),
    "arborio rice": (["carbohydrate"], []),
    "glutinous rice": (["carbohydrate"], []),
    "wheat": (["carbohydrate", "protein", "dietary fibre"], []),
    "durum wheat": (["carbohydrate", "protein"], []),
    "wheat flour": (["carbohydrate", "protein"], ["wheat"]),
    "pasta": (["carbohydrate", "protein"], ["durum wheat"]),
    "spaghetti": (["carbohydrate", "protein"], ["durum wheat"]),
    "bread": (["carbohydrate", "sodium"], ["wheat flour", "yeast"]),
    "baguette": (["carbohydrate"], ["wheat flour", "yeast"]),
    "burger bun": (["carbohydrate"], ["wheat flour", "yeast"]),
    "rye": (["carbohydrate", "dietary fibre"], []),
    "rye bread": (["carbohydrate", "dietary fibre"], ["rye"]),
    "barley": (["carbohydrate", "dietary fibre"], []),
    "oats": (["carbohydrate", "dietary fibre"], []),
    "maize": (["carbohydrate", "dietary fibre"], []),
    "cornmeal": (["carbohydrate"], ["maize"]),
    "masa harina": (["carbohydrate", "calcium"], ["maize"]),
    "corn tortilla": (["carbohydrate", "calcium"], ["masa harina"]),
    "hominy": (["carbohydrate", "dietary fibre"], ["maize"]),
    "teff": (["carbohydrate", "iron", "calcium"], []),
    "breadcrumbs": (["carbohydrate"], ["bread"]),
    "panko": (["carbohydrate"], ["bread"]),
    "filo pastry": (["carbohydrate"], ["wheat flour"]),
    "puff pastry": (["carbohydrate", "fat"], ["wheat flour", "butter"]),
    "shortcrust pastry": (["carbohydrate", "fat"], ["wheat flour", "butter"]),
    "ladyfingers": (["carbohydrate"], ["wheat flour", "eggs", "sugar"]),
    "wheat noodles": (["carbohydrate"], ["wheat flour"]),
    "rice noodles": (["carbohydrate"], ["rice"]),
    "rice paper": (["carbohydrate"], ["rice"]),
    "rice cakes": (["carbohydrate"], ["rice"]),
    "glass noodles": (["carbohydrate"], ["sweet potato"]),
    "tapioca flour": (["carbohydrate"], ["cassava"]),
    "yeast": (["thiamine", "folate"], []),
    # starchy roots, tubers and plantain
    "potato": (["carbohydrate", "vitamin C", "potassium"], []),
    "sweet potato": (["carbohydrate", "vitamin A", "dietary fibre"], []),
    "cassava": (["carbohydrate", "vitamin C"], []),
    "taro": (["carbohydrate", "dietary fibre"], []),
    "yam": (["carbohydrate", "potassium"], []),
    "plantain": (["carbohydrate", "potassium"], []),
    # legumes and soy products
    "black beans": (["protein", "dietary fibre", "folate"], []),
    "kidney beans": (["protein", "dietary fibre", "iron"], []),
    "cannellini beans": (["protein", "dietary fibre"], []),
    "fava beans": (["protein", "dietary fibre", "folate"], []),
    "chickpeas": (["protein", "dietary fibre", "folate"], []),
    "lentils": (["protein", "iron", "dietary fibre"], []),
    "black gram": (["protein", "dietary fibre"], []),
    "black-eyed peas": (["protein", "dietary fibre", "folate"], []),
    "split peas": (["protein", "dietary fibre"], []),
    "soybeans": (["protein", "iron", "dietary fibre"], []),
    "peanuts": (["protein", "fat", "niacin"], []),
    "tofu": (["protein", "calcium", "iron"], ["soybeans"]),
    "tempeh": (["protein", "dietary fibre"], ["soybeans"]),
    "bean sprouts": (["vitamin C", "folate"], []),
    # sauces, pastes, seasonings and drinks used in cooking
    "soy sauce": (["sodium"], ["soybeans", "wheat"]),
    "miso": (["sodium", "protein"], ["soybeans"]),
    "doubanjiang": (["sodium"], ["fava beans", "chili pepper"]),
    "gochujang": (["sodium"], ["chili pepper", "glutinous rice", "soybeans"]),
    "kecap manis": (["sodium"], ["soybeans", "palm sugar"]),
    "hoisin sauce": (["sodium"], ["soybeans"]),
    "fish sauce": (["sodium"], ["anchovies", "salt"]),
    "hot sauce": (["sodium"], ["chili pepper", "vinegar"]),
    "ketchup": (["sodium"], ["tomato", "vinegar", "sugar"]),
    "mustard": ([], ["mustard seeds"]),
    "green curry paste": ([], ["chili pepper", "lemongrass", "galangal"]),
    "curry powder": ([], ["turmeric", "cumin", "coriander seeds"]),
    "berbere": ([], ["chili pepper", "fenugreek", "ginger"]),
    "chili oil": (["fat"], ["chili pepper", "vegetable oil"]),
    "bechamel sauce": (["calcium", "fat"], ["milk", "butter", "wheat flour"]),
    "gravy": ([], ["beef stock", "wheat flour"]),
    "beef stock": ([], ["beef"]),
    "chicken stock": ([], ["chicken"]),
    "dashi": (["iodine"], ["kombu", "bonito flakes"]),
    "pomegranate molasses": ([], ["pomegranate"]),
    "apricot jam": (["carbohydrate"], ["apricots", "sugar"]),
    "vinegar": ([], []),
    "rice vinegar": ([], ["rice"]),
    "red wine vinegar": ([], ["red wine"]),
    "mirin": ([], ["glutinous rice"]),
    "red wine": ([], ["grapes"]),
    "white wine": ([], ["grapes"]),
    "beer": ([], ["barley"]),
    "kirsch": ([], ["cherries"]),
    "coffee": ([], []),
    "salt": (["sodium"], []),
    "bicarbonate of soda": (["sodium"], []),
    "sugar": (["carbohydrate"], []),
    "palm sugar": (["carbohydrate"], []),
    "honey": (["carbohydrate"], []),
    "meringue": (["carbohydrate"], ["eggs", "sugar"]),
    "sauerkraut": (["vitamin C", "vitamin K"], ["cabbage"]),
    "tomato paste": (["potassium", "vitamin C"], ["tomato"]),
    "coconut milk": (["fat"], ["coconut"]),
    "desiccated coconut": (["fat", "dietary fibre"], ["coconut"]),
    "dark chocolate": (["iron", "magnesium"], ["cocoa beans", "sugar"]),
    "cocoa powder": (["iron", "magnesium", "dietary fibre"], ["cocoa beans"]),
    "cocoa beans": (["magnesium", "iron"], []),
    # dairy and eggs
    "milk": (["calcium", "protein"], []),
    "sheep's milk": (["calcium", "protein"], []),
    "cream": (["fat", "vitamin A"], ["milk"]),
    "butter": (["fat", "vitamin A"], ["cream"]),
    "ghee": (["fat", "vitamin A"], ["butter"]),
    "buttermilk": (["calcium"], ["milk"]),
    "yoghurt": (["calcium", "protein"], ["milk"]),
    "jameed": (["protein", "calcium"], ["yoghurt"]),
    "sour cream": (["fat"], ["cream"]),
    "condensed milk": (["carbohydrate", "calcium"], ["milk", "sugar"]),
    "mascarpone": (["fat"], ["cream"]),
    "paneer": (["protein", "calcium"], ["milk"]),
    "mozzarella": (["protein", "calcium"], ["milk"]),
    "parmesan": (["protein", "calcium", "phosphorus"], ["milk"]),
    "pecorino romano": (["protein", "calcium"], ["sheep's milk"]),
    "feta": (["protein", "calcium"], ["sheep's milk"]),
    "gruyere": (["protein", "calcium"], ["milk"]),
    "emmental": (["protein", "calcium"], ["milk"]),
    "provolone": (["protein", "calcium"], ["milk"]),
    "quark": (["protein", "calcium"], ["milk"]),
    "cheese curds": (["protein", "calcium"], ["milk"]),
    "eggs": (["protein", "vitamin D", "vitamin B12"], []),
    # meat and poultry
    "beef": (["protein", "iron", "zinc"], []),
    "veal": (["protein", "vitamin B12"], []),
    "lamb": (["protein", "zinc", "vitamin B12"], []),
    "pork": (["protein", "thiamine"], []),
    "bacon": (["protein", "sodium"], ["pork"]),
    "ham": (["protein", "sodium"], ["pork"]),
    "guanciale": (["fat"], ["pork"]),
    "chorizo": (["protein", "fat"], ["pork", "paprika"]),
    "smoked sausage": (["protein", "sodium"], ["pork"]),
    "lard": (["fat"], ["pork"]),
    "chicken": (["protein", "niacin"], []),
    "duck": (["protein", "iron"], []),
    "turkey": (["protein", "selenium"], []),
    # fish, seafood and seaweed
    "tuna": (["protein", "omega-3 fatty acids", "selenium"], []),
    "cod": (["protein", "iodine"], []),
    "white fish": (["protein", "iodine"], []),
    "salt cod": (["protein", "sodium"], ["cod", "salt"]),
    "anchovies": (["protein", "omega-3 fatty acids", "calcium"], []),
    "sprats": (["protein", "omega-3 fatty acids", "calcium"], []),
    "mussels": (["protein", "iron", "vitamin B12"], []),
    "clams": (["protein", "iron", "vitamin B12"], []),
    "prawns": (["protein", "selenium"], []),
    "octopus": (["protein", "vitamin B12"], []),
    "crab": (["protein", "zinc"], []),
    "bonito flakes": (["protein"], ["tuna"]),
    "nori": (["iodine"], []),
    "kombu": (["iodine"], []),
    "wakame": (["iodine"], []),
    # vegetables
    "spinach": (["iron", "vitamin K", "folate"], []),
    "kale": (["vitamin K", "vitamin C", "calcium"], []),
    "cabbage": (["vitamin C", "vitamin K"], []),
    "napa cabbage": (["vitamin C", "vitamin K"], []),
    "tomato": (["vitamin C", "potassium"], []),
    "bell pepper": (["vitamin C", "vitamin A"], []),
    "chili pepper": (["vitamin C"], []),
    "poblano pepper": (["vitamin C"], []),
    "scotch bonnet": (["vitamin C"], []),
    "cucumber": ([], []),
    "onion": ([], []),
    "red onion": ([], []),
    "shallots": (["vitamin B6"], []),
    "spring onion": (["vitamin K", "vitamin C"], []),
    "garlic": (["vitamin B6", "vitamin C"], []),
    "carrot": (["vitamin A"], []),
    "celery": (["vitamin K"], []),
    "daikon": (["vitamin C"], []),
    "swede": (["vitamin C"], []),
    "aubergine": (["dietary fibre"], []),
    "courgette": (["vitamin C"], []),
    "okra": (["vitamin C", "vitamin K"], []),
    "green beans": (["vitamin K", "vitamin C"], []),
    "cauliflower": (["vitamin C", "folate"], []),
    "mushrooms": (["riboflavin", "niacin"], []),
    "fennel": (["vitamin C", "potassium"], []),
    "lettuce": (["vitamin K", "vitamin A"], []),
    # fruit
    "avocado": (["fat", "dietary fibre", "potassium"], []),
    "lime": (["vitamin C"], []),
    "lemon": (["vitamin C"], []),
    "apple": (["dietary fibre"], []),
    "grapes": ([], []),
    "raisins": (["potassium", "dietary fibre"], ["grapes"]),
    "apricots": ([], []),
    "dried apricots": (["potassium", "iron"], ["apricots"]),
    "cherries": ([], []),
    "pineapple": (["vitamin C"], []),
    "mango": (["vitamin C", "vitamin A"], []),
    "pomegranate": (["vitamin K", "dietary fibre"], []),
    "pear": (["dietary fibre"], []),
    "strawberries": (["vitamin C"], []),
    "coconut": (["fat", "dietary fibre"], []),
    "olives": (["fat", "vitamin E"], []),
    "tamarind": (["potassium", "thiamine"], []),
    "capers": (["sodium", "vitamin K"], []),
    "ackee": (["fat"], []),
    # nuts and seeds
    "almonds": (["vitamin E", "magnesium", "protein"], []),
    "walnuts": (["omega-3 fatty acids", "protein"], []),
    "pecans": (["fat", "dietary fibre"], []),
    "sesame seeds": (["calcium", "iron"], []),
    "mustard seeds": (["selenium", "magnesium"], []),
    # herbs and spices
    "saffron": ([], []),
    "basil": (["vitamin K"], []),
    "Thai basil": (["vitamin K"], []),
    "parsley": (["vitamin K", "vitamin C"], []),
    "mint": ([], []),
    "oregano": (["vitamin K"], []),
    "thyme": (["vitamin K"], []),
    "fenugreek": (["iron"], []),
    "cumin": (["iron"], []),
    "coriander seeds": (["iron"], []),
    "turmeric": ([], []),
    "cinnamon": ([], []),
    "cardamom": ([], []),
    "star anise": ([], []),
    "Sichuan pepper": ([], []),
    "allspice": ([], []),
    "paprika": (["vitamin A"], []),
    "juniper berries": ([], []),
    "makrut lime leaves": ([], []),
    "ginger": ([], []),
    "lemongrass": ([], []),
    "galangal": ([], []),
    # fats and oils
    "olive oil": (["fat", "vitamin E"], ["olives"]),
    "vegetable oil": (["fat", "vitamin E"], []),
    "sesame oil": (["fat"], ["sesame seeds"]),
    "palm oil": (["fat", "vitamin A"], []),
}

# --------------------------------------------------------------------------- nutrition
# nutrient: (body functions it supports, nutrients whose absorption it aids)
NUTRIENTS = {
    "protein": (["muscle growth"], []),
    "carbohydrate": (["energy production"], []),
    "dietary fibre": (["bowel function"], []),
    "fat": (["energy storage"], ["vitamin A", "vitamin D", "vitamin E", "vitamin K"]),
    "omega-3 fatty acids": (["cardiac function", "cognitive function"], []),
    "vitamin A": (["vision", "immune function"], []),
    "thiamine": (["energy production", "cardiac function"], []),
    "riboflavin": (["energy production", "vision"], []),
    "niacin": (["energy production", "nerve function"], []),
    "vitamin B6": (["red blood cell formation", "immune function"], []),
    "folate": (["red blood cell formation", "neural tube development"], []),
    "vitamin B12": (["red blood cell formation", "nerve function"], []),
    "vitamin C": (["immune function", "collagen formation"], ["iron"]),
    "vitamin D": (["bone mineralisation", "immune function"], ["calcium", "phosphorus"]),
    "vitamin E": (["cell protection"], []),
    "vitamin K": (["blood clotting", "bone mineralisation"], []),
    "calcium": (["bone mineralisation", "muscle contraction"], []),
    "iron": (["oxygen transport", "red blood cell formation"], []),
    "magnesium": (["muscle contraction", "energy production"], []),
    "phosphorus": (["bone mineralisation", "energy production"], []),
    "potassium": (["blood pressure regulation", "muscle contraction"], []),
    "sodium": (["fluid balance", "nerve function"], []),
    "zinc": (["immune function", "wound healing"], []),
    "iodine": (["thyroid hormone production", "cognitive function"], []),
    "selenium": (["thyroid hormone production", "cell protection"], []),
}

# body function: body parts it involves
BODY_FUNCTIONS = {
    "oxygen transport": ["red blood cells"],
    "red blood cell formation": ["bone marrow"],
    "bone mineralisation": ["bones", "teeth"],
    "blood clotting": ["platelets", "liver"],
    "muscle contraction": ["muscles"],
    "nerve function": ["nerves"],
    "vision": ["eyes"],
    "immune function": ["white blood cells"],
    "collagen formation": ["skin", "blood vessels"],
    "wound healing": ["skin"],
    "thyroid hormone production": ["thyroid gland"],
    "energy production": ["mitochondria"],
    "fluid balance": ["kidneys"],
    "blood pressure regulation": ["kidneys", "blood vessels"],
    "cardiac function": ["heart"],
    "bowel function": ["large intestine"],
    "muscle growth": ["muscles"],
    "cognitive function": ["brain"],
    "neural tube development": ["brain", "spinal cord"],
    "energy storage": ["adipose tissue"],
    "cell protection": ["cell membranes"],
}

# --------------------------------------------------------------------------- countries
# country: its staple foods (left empty where no single staple is textbook knowledge)
COUNTRIES = {
    "Spain": [], "Italy": ["pasta"], "Greece": [], "France": ["bread"], "Portugal": [],
    "United Kingdom": ["potato"], "Ireland": ["potato"], "Germany": ["potato", "rye bread"],
    "Austria": [], "Hungary": [], "Poland": ["potato"], "Switzerland": [], "Sweden": ["potato"],
    "Netherlands": ["potato"], "Belgium": ["potato"],
    "United States": ["wheat", "maize"], "Canada": [], "Mexico": ["maize"], "Jamaica": [],
    "Peru": ["potato"], "Brazil": ["rice", "black beans"], "Argentina": ["beef"],
    "Morocco": ["wheat"], "Egypt": ["bread", "fava beans"], "Tunisia": ["wheat"],
    "Ethiopia": ["teff"], "Senegal": ["rice"], "Ghana": ["cassava", "plantain"],
    "Nigeria": ["yam", "cassava"], "South Africa": ["maize"],
    "Jordan": ["wheat"], "Iran": ["rice"], "India": ["rice", "wheat"], "China": ["rice", "wheat"],
    "Japan": ["rice"], "Korea": ["rice"], "Thailand": ["rice"], "Vietnam": ["rice"],
    "Indonesia": ["rice"], "Philippines": ["rice"], "Malaysia": ["rice"], "Singapore": ["rice"],
    "Australia": [], "New Zealand": [], "Fiji": ["taro", "cassava"],
}

# --------------------------------------------------------------------------- techniques
TECHNIQUES = [
    "boiling", "simmering", "stewing", "braising", "steaming", "roasting", "baking", "grilling",
    "deep-frying", "pan-frying", "stir-frying", "griddling", "fermenting", "pickling",
    "marinating", "curing", "blending", "mashing", "grinding", "stirring", "whisking",
    "tempering", "melting", "pit cooking",
]


# --------------------------------------------------------------------------- build
def make_id(label: str) -> str:
    """CamelCase ASCII id: "short-grain rice" -> "ShortGrainRice", "sheep's milk" -> "SheepsMilk"."""
    words = re.split(r"[^A-Za-z0-9]+", label.replace("'", ""))
    return "".join(w[:1].upper() + w[1:] for w in words if w)


def collect() -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """(label -> type, [(src label, relation id, dst label)]) from the tables."""
    types: dict[str, str] = {}

    def declare(labels, etype: str) -> None:
        for label in labels:
            if types.setdefault(label, etype) != etype:
                raise SystemExit(f"{label!r} declared as {types[label]!r} and as {etype!r}")

    declare(DISHES, "dish")
    declare(INGREDIENTS, "ingredient")
    declare(NUTRIENTS, "nutrient")
    declare(BODY_FUNCTIONS, "body function")
    declare({p for parts in BODY_FUNCTIONS.values() for p in parts}, "body part")
    declare(COUNTRIES, "country")
    declare(TECHNIQUES, "technique")

    triples: list[tuple[str, str, str]] = []
    for dish, (country, ingredients, techniques) in DISHES.items():
        triples.append((dish, "originates_from", country))
        triples += [(dish, "has_ingredient", i) for i in ingredients]
        triples += [(dish, "prepared_by", t) for t in techniques]
    for ing, (nutrients, made_from) in INGREDIENTS.items():
        triples += [(ing, "source_of", n) for n in nutrients]
        triples += [(ing, "made_from", m) for m in made_from]
    for nutrient, (functions, absorbed) in NUTRIENTS.items():
        triples += [(nutrient, "supports", f) for f in functions]
        triples += [(nutrient, "aids_absorption", a) for a in absorbed]
    for function, parts in BODY_FUNCTIONS.items():
        triples += [(function, "involves", p) for p in parts]
    for country, staples in COUNTRIES.items():
        triples += [(country, "staple_food", s) for s in staples]
    # every label an edge names must be declared, with the type its relation expects
    for src, rel, dst in triples:
        _, src_type, dst_type = RELATIONS[rel]
        for end, want in ((src, src_type), (dst, dst_type)):
            if types.get(end) != want:
                raise SystemExit(f"{src!r} -{rel}-> {dst!r}: {end!r} is {types.get(end)!r}, expected {want!r}")
    return types, triples


def build() -> dict:
    types, triples = collect()
    ids = {label: make_id(label) for label in types}
    assert len(set(ids.values())) == len(ids), "two labels give the same id"
    entities = sorted(({"id": ids[l], "label": l, "type": t} for l, t in types.items()),
                      key=lambda e: (e["type"], e["id"]))
    edges = sorted({(ids[s], r, ids[d]) for s, r, d in triples})
    assert len(edges) == len(triples), "duplicate edge in the tables"
    return {
        "version": "1.0",
        "domain": "food and cooking",
        "entities": entities,
        "relations": [{"id": rid, "label": label} for rid, (label, _, _) in RELATIONS.items()],
        "edges": [{"src": s, "rel": r, "dst": d} for s, r, d in edges],
    }


def dump(kg: dict) -> str:
    """The layout of data/kg.json: 2-space indent, one entity/relation/edge per line."""
    def block(name: str, items: list[dict], last: bool = False) -> str:
        rows = ",\n".join("    " + json.dumps(item, ensure_ascii=False) for item in items)
        return f'  "{name}": [\n{rows}\n  ]' + ("" if last else ",")
    return "\n".join([
        "{",
        f'  "version": {json.dumps(kg["version"])},',
        f'  "domain": {json.dumps(kg["domain"])},',
        block("entities", kg["entities"]),
        block("relations", kg["relations"]),
        block("edges", kg["edges"], last=True),
        "}",
    ]) + "\n"


# --------------------------------------------------------------------------- checks
MAX_FRONTIER = 4


def chain_counts(succ: dict[tuple[str, str], list[str]], starts: list[str], rels: list[str],
                 max_hops: int = 5) -> tuple[Counter, dict[int, list]]:
    """Count (start, relation chain) pairs whose frontier, mapped set-wise through each relation,
    stays non-empty, at most MAX_FRONTIER entities, and never contains the start."""
    counts: Counter = Counter()
    examples: dict[int, list] = defaultdict(list)

    def walk(start: str, chain: list[str], frontier: set[str], trail: list[list[str]]) -> None:
        for rel in rels:
            nxt = {d for e in frontier for d in succ.get((e, rel), ())}
            if not nxt or len(nxt) > MAX_FRONTIER or start in nxt:
                continue
            hops = len(chain) + 1
            counts[hops] += 1
            step = sorted(nxt)
            examples[hops].append((start, chain + [rel], trail + [step]))
            if hops < max_hops:
                walk(start, chain + [rel], nxt, trail + [step])

    for s in starts:
        walk(s, [], {s}, [])
    return counts, examples


def check(kg: dict, raw: str) -> None:
    ents = {e["id"]: e for e in kg["entities"]}
    # structure (what library/graph/kg.py checks, minus its entity-type list)
    assert json.loads(raw) == kg and raw.isascii()
    assert list(kg) == ["version", "domain", "entities", "relations", "edges"]
    assert all(set(e) == {"id", "label", "type"} and e["label"].strip() for e in kg["entities"])
    assert all(re.fullmatch(r"[A-Z][A-Za-z0-9]*", i) for i in ents)
    assert len(ents) == len(kg["entities"])
    folded = Counter(e["label"].casefold() for e in kg["entities"])
    assert max(folded.values()) == 1, [l for l, n in folded.items() if n > 1]
    rels = {r["id"]: r["label"] for r in kg["relations"]}
    seen = set()
    for e in kg["edges"]:
        assert e["src"] in ents and e["dst"] in ents and e["rel"] in rels and e["src"] != e["dst"]
        assert (e["src"], e["rel"], e["dst"]) not in seen
        seen.add((e["src"], e["rel"], e["dst"]))
    touched = {e["src"] for e in kg["edges"]} | {e["dst"] for e in kg["edges"]}
    assert touched == set(ents), f"entities without edges: {sorted(set(ents) - touched)}"
    # every edge of a relation joins the same two types
    sig = defaultdict(set)
    for e in kg["edges"]:
        sig[e["rel"]].add((ents[e["src"]]["type"], ents[e["dst"]]["type"]))
    assert all(len(s) == 1 for s in sig.values()), dict(sig)
    assert all(sig[rid] == {(st, dt)} for rid, (_, st, dt) in RELATIONS.items())
    assert_acyclic(kg["edges"])

    succ: dict[tuple[str, str], list[str]] = defaultdict(list)
    for e in kg["edges"]:
        succ[(e["src"], e["rel"])].append(e["dst"])
    mean_branch = sum(map(len, succ.values())) / len(succ)

    print(f"entities {len(ents)}  edges {len(kg['edges'])}  relations {len(rels)}")
    print("entities by type:", dict(sorted(Counter(e["type"] for e in kg["entities"]).items())))
    print(f"mean successors over {len(succ)} (entity, relation) groups: {mean_branch:.2f}")
    print(f"{'relation':16} {'label':22} {'types':32} {'edges':>5} {'groups':>6} {'mean':>5} {'max':>4}")
    for rid, label in rels.items():
        sizes = [len(v) for (s, r), v in succ.items() if r == rid]
        (st, dt), = sig[rid]
        print(f"{rid:16} {label:22} {st + ' -> ' + dt:32} {sum(sizes):5} {len(sizes):6} "
              f"{sum(sizes) / len(sizes):5.2f} {max(sizes):4}")

    counts, examples = chain_counts(succ, sorted(ents), list(rels))
    print("(start, relation chain) pairs, frontier <= 4, start never revisited:",
          "  ".join(f"{h} hops: {counts[h]}" for h in range(1, 6)))
    words = {i: e["label"] for i, e in ents.items()}
    print("example 4-hop chains (one per relation chain, smallest frontiers first):")
    best: dict[tuple, tuple] = {}
    for start, chain, trail in examples[4]:
        key = (max(map(len, trail)), sum(map(len, trail)), start)
        if tuple(chain) not in best or key < best[tuple(chain)][0]:
            best[tuple(chain)] = (key, start, chain, trail)
    picks = sorted(best.values())
    for _, start, chain, trail in picks[:: max(1, len(picks) // 10)][:10]:
        print(f"  Start at {words[start]}. It " + ", which ".join(
            f"{rels[r]} [{' / '.join(words[x] for x in step)}]" for r, step in zip(chain, trail)))

    assert len(ents) >= 250 and len(kg["edges"]) >= 700
    assert mean_branch >= 1.8
    assert 6 <= len(rels) <= 9
    assert all(len(v) == 1 for (s, r), v in succ.items() if r == "originates_from")
    assert counts[4] >= 300 and counts[5] >= 300


def assert_acyclic(edges: list[dict]) -> None:
    """No chain of same-type edges ("is made from", "aids absorption of") comes back on itself."""
    succ = defaultdict(set)
    for e in edges:
        succ[e["src"]].add(e["dst"])
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"cycle: {path + (node,)}"
        if node not in done:
            for nxt in sorted(succ[node]):
                visit(nxt, path + (node,))
            done.add(node)

    for node in sorted(succ):
        visit(node, ())


def main() -> None:
    kg = build()
    raw = dump(kg)
    check(kg, raw)
    OUT.write_text(raw, encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
