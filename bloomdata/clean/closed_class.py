"""Small closed-class (function-word) lists for the major BLOOM languages: the closed-class word filter.

Prose is ~30-50% function words in every language; keyword lists, menus, tables and text in another
language are not, which is what ROOTS's "stopwords ratio" filter catches. Source: the per-language stopword
lists of BigScience's ROOTS filtering (github.com/bigscience-workshop/data-preparation,
preprocessing/training/01b_oscar_cleaning_and_filtering/stopwords.py, built from native speakers with
github.com/6/stopwords-json and github.com/stopwords-iso/stopwords-iso), cut down by hand to each
language's most frequent articles, pronouns, prepositions, conjunctions, particles and auxiliaries. Short
lists lower the ratio of real prose (en ~0.35, measured on tests/data/corpus), so the default minimum
(0.05) is lower than ROOTS's (0.3 for en with its full list).

Entries are word units (``bloomdata.clean.text.word_units``): lower case, no surrounding punctuation (so no
elided forms such as French l'; "l'homme" is one unit); for Chinese single characters, since each Han
character is one unit. Languages without a list skip the
check. They are config: ``quality.closed_class_words: {LANG: [...] or FILE}`` replaces a language's list.
"""

from __future__ import annotations

CLOSED_CLASS_WORDS: dict[str, tuple[str, ...]] = {
    "ar": ("في", "من", "على", "إلى", "عن", "مع", "أن", "إن", "لا", "ما", "لم", "لن", "قد", "هذا", "هذه", "ذلك",
           "تلك", "التي", "الذي", "الذين", "هو", "هي", "هم", "نحن", "أنا", "كان", "كانت", "و", "أو", "ثم", "بين",
           "عند", "كل", "بعد", "قبل", "حتى", "كما", "لكن", "بل", "إذا", "عام", "أي", "غير", "فيها", "منذ", "خلال"),
    "ca": ("de", "la", "el", "i", "que", "a", "en", "els", "les", "per", "un", "una", "amb", "del",
           "es", "no", "al", "als", "dels", "com", "més", "o", "però", "hi", "ha", "va", "és", "seu", "seva",
           "aquest", "aquesta", "ser", "també", "li", "ho", "ja", "quan", "tot", "on", "han", "són"),
    "en": ("the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "with", "as", "was", "on", "be", "by",
           "at", "this", "are", "from", "or", "an", "have", "has", "had", "not", "but", "they", "he", "she", "we",
           "you", "i", "his", "her", "their", "its", "which", "who", "will", "would", "can", "there", "been",
           "were", "all", "also", "if", "into", "than", "more", "one", "about", "so", "them", "our", "my"),
    "es": ("de", "la", "que", "el", "en", "y", "a", "los", "del", "se", "las", "por", "un", "para", "con", "no",
           "una", "su", "al", "es", "lo", "como", "más", "pero", "sus", "le", "ya", "o", "fue", "este", "ha",
           "sí", "porque", "esta", "son", "entre", "cuando", "muy", "sin", "sobre", "también", "me", "hasta",
           "hay", "donde", "quien", "desde", "todo", "nos", "durante", "todos", "uno", "les", "ni", "era"),
    "eu": ("eta", "da", "ez", "du", "dira", "zen", "ere", "bat", "hau", "hori", "hura", "baina", "edo", "izan",
           "dute", "zuen", "nahiz", "dela", "beste", "oso", "egin", "behar", "bere", "gure", "ni", "zu",
           "ditu", "dago", "daude", "ziren", "baita", "bezala", "gero", "orain", "baino", "nola", "zer", "non"),
    "fr": ("de", "la", "le", "et", "les", "des", "à", "en", "un", "une", "du", "que", "qui", "est", "dans", "pour",
           "pas", "au", "sur", "par", "plus", "ne", "se", "il", "elle", "ce", "cette", "avec", "son", "sa", "ses",
           "aux", "mais", "ou", "nous", "vous", "ils", "on", "sont", "été", "a",
           "y", "leur", "comme", "tout", "je", "lui", "même", "aussi", "être", "avait", "était"),
    "hi": ("के", "का", "की", "है", "में", "और", "को", "से", "पर", "यह", "कि", "एक", "भी", "नहीं", "हैं", "था",
           "थे", "थी", "ने", "तो", "ही", "वह", "इस", "उस", "या", "लिए", "जो", "कर", "हो", "गया", "किया", "हुए",
           "तक", "साथ", "अपने", "कुछ", "वे", "हम", "मैं", "आप", "जब", "जैसे", "इसके", "उनके", "रहा", "रही"),
    "id": ("yang", "dan", "di", "ini", "itu", "dengan", "untuk", "dari", "dalam", "tidak", "akan", "pada", "ke",
           "juga", "ada", "adalah", "oleh", "atau", "saya", "kami", "kita", "mereka", "dia", "ia", "sudah",
           "karena", "bisa", "telah", "tersebut", "lebih", "seperti", "bahwa", "namun", "hanya", "saat", "jika",
           "para", "sebagai", "bagi", "kepada", "masih", "belum", "harus", "tetapi", "agar", "hal", "secara"),
    "pt": ("de", "a", "o", "que", "e", "do", "da", "em", "um", "para", "é", "com", "não", "uma", "os", "no", "se",
           "na", "por", "mais", "as", "dos", "como", "mas", "foi", "ao", "ele", "das", "tem", "à", "seu", "sua",
           "ou", "ser", "quando", "muito", "há", "nos", "já", "está", "eu", "também", "só", "pelo", "pela",
           "até", "isso", "ela", "entre", "era", "depois", "sem", "mesmo", "aos", "ter", "seus", "quem", "nas"),
    "sw": ("na", "ya", "wa", "kwa", "za", "la", "katika", "ni", "kuwa", "hiyo", "hii", "huo", "hizo", "yake",
           "wake", "zake", "lake", "cha", "vya", "kama", "lakini", "au", "pia", "bila", "hata", "sana", "kwamba",
           "ili", "baada", "kabla", "hadi", "tu", "si", "wao", "yeye", "mimi", "sisi", "wewe", "hapa", "pale"),
    "ur": ("کے", "کا", "کی", "ہے", "میں", "اور", "کو", "سے", "پر", "یہ", "کہ", "ایک", "بھی", "نہیں", "ہیں",
           "تھا", "تھے", "تھی", "نے", "تو", "ہی", "وہ", "اس", "ان", "یا", "لیے", "جو", "کر", "ہو", "گیا", "کیا",
           "تک", "ساتھ", "اپنے", "کچھ", "ہم", "آپ", "جب", "جیسے", "رہا", "رہی", "والے", "اپنی", "گئی"),
    "vi": ("và", "của", "là", "có", "không", "được", "các", "trong", "cho", "với", "những", "một", "này", "đã",
           "người", "để", "thì", "khi", "từ", "cũng", "như", "đến", "ra", "lại", "vào", "đó", "nhiều", "rằng",
           "sẽ", "mà", "nên", "nhưng", "hay", "hoặc", "tôi", "chúng", "họ", "anh", "em", "bị", "về", "theo", "do"),
    "zh": ("的", "了", "是", "在", "和", "与", "及", "或", "而", "但", "也", "就", "都", "又", "还", "很", "不", "没",
           "我", "你", "他", "她", "它", "们", "这", "那", "其", "之", "所", "被", "把", "从", "对", "向", "于", "为",
           "以", "由", "给", "让", "将", "会", "能", "要", "个", "等", "着", "过", "地", "得", "吗", "呢", "吧", "有"),
}
