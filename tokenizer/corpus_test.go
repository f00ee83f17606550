package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// handWritten are strings chosen for what they exercise.
var handWritten = []string{
	"", " ", "  ", "\n", "\r\n", "\t", "a", "Hello, world!", "Hello world", " Hello", "hello   world  ",
	"The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "tHe QuIcK",
	"it's", "It'S", "we'll", "WE'LL", "they're", "I've", "I'm", "he'd", "don't", "DON'T", "'s", "'", "''", "'ll've",
	"rock'n'roll", "o'clock", "'hello'", "\"quoted\"", "ſ", "'ſ", "Kelvin \u212a",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n", "for i in range(10):\n    print(i)\n\n", "x = [1, 2, 3]; y = {'a': 1}",
	"if (a && b || !c) { return a->b; }", "#include <stdio.h>\nint main(void){return 0;}", "SELECT * FROM t WHERE a = 'b';",
	`{"key": "value", "n": 12345, "list": [1.5, -2e10, null, true], "nested": {"a": "b"}}`, "<html><body><p>hi</p></body></html>",
	"https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Program Files\\x", "~/dir/file.txt",
	"1", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "-42", "1e-10", "0x1F",
	"１２３４５", "٠١٢٣٤٥٦٧٨٩", "۱۲۳", "१२३", "Ⅻ", "½ ¾", "²³", "①②",
	"你好，世界！", "我爱北京天安门。", "日本語のテキストです。カタカナ、ひらがな。", "漢字かな交じり文",
	"안녕하세요 세계", "한국어 텍스트입니다.", "مرحبا بالعالم", "اللغة العربية جميلة", "नमस्ते दुनिया", "हिन्दी भाषा",
	"Привет, мир!", "Ελληνικά", "עברית", "ไทย ภาษา", "Tiếng Việt có dấu", "Ça va? Où êtes-vous? Größe Straße",
	"👋", "👨‍👩‍👧‍👦", "🇫🇷🇺🇸🇯🇵", "👍🏽👍🏿", "🧑‍💻", "❤️", "🏳️‍🌈", "emoji 😀 in text 🎉!",
	"a\u00a0b", "a\u3000b", "a\u2003b", "a\u200bb", "a\ufeffb", "a\u2028b", "a\u0085b", "line\vtab\fform",
	"\r\n\r\n", "  \n  \n", "a \n b", "a\n\n\nb", "trailing   ", "   leading", "\t\tindent", " \u00a0 \u3000 ",
	"ｆｕｌｌｗｉｄｔｈ　ＡＢＣ", "ｱｲｳ", "e\u0301", "é", "e\u0301\u0302\u0303", "\u1100\u1161\u11a8", "Å", "A\u030a",
	"\u0000", "\u0001\u0002", "\u007f", "\ue000\uf8ff", "\U000f0000", "\U0001d400\U0001d401", "\U00020000\U0002a6d6",
	"\ufffd", "\ufffe", "\u1c89", "\U00016d40", "\u0950", "\U00011935\U00011930", "\U00011938", "x\U00011935\u0301\U00011930",
	"<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
	"<s>[INST] hi [/INST]</s>", "<bos><start_of_turn>user\nhi<end_of_turn>", "<|startoftext|><|start|>user<|message|>hi<|end|>",
	"<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>", "<|endoftext|>", "<|im_start|><|im_start|>", "<|im_start", "im_start|>",
	"text<|im_end|>text", "<think>\nreason\n</think>\n\nanswer", "<tool_call>{}</tool_call>", "<unk>", "</s>", "<pad>",
	"▁", "▁▁", "▁hello", "Ġ", "Ċ", "<0x0A>", "  <s>  ", "<s><s>", "a<s>b",
}

// fragments are pieces random strings are built from.
var fragments = []string{
	"the", "The", " and", " of", "ing", " running", "Hello", " world", "don't", "'s", "'LL", "'re", "can't",
	" ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", "\u00a0", "\u3000", "\v", "\f", "\u2009", "\u200b", "\u2028",
	"0", "7", "42", "123", "2024", "3.14", "1,000", "１２", "٣٤", "९",
	".", ",", "!", "?", "...", "—", "-", "--", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "\"", "'", "`",
	"#", "$", "%", "&", "*", "+", "=", "@", "^", "_", "|", "~", ":", ";", "→", "©", "€", "¿", "«", "»",
	"你好", "世界", "中文", "日本", "テスト", "ひらがな", "한국", "어", "مرحبا", "عربي", "नमस्ते", "हिन्दी", "Привет", "мир",
	"é", "e\u0301", "ñ", "ü", "ß", "Ω", "ﬁ", "ǅ", "\u0301", "\u0308\u0301", "ſ",
	"😀", "👍🏽", "👨‍👩‍👧", "🇩🇪", "❤️", "✨", "🧑‍🚀", "\U0001f600\u200d", "\U00010000", "\ue000", "\x01", "\x7f",
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<s>", "</s>", "<unk>",
	"<bos>", "<eos>", "<start_of_turn>", "<|start|>", "<|message|>", "<|return|>", "<｜begin▁of▁sentence｜>", "<think>",
	"▁", "Ġ", "<0x41>", "func", "return", "{\"a\":", "null", "true", "=>", "::", "!=", "&&", "||", "//", "/*", "*/",
}

// runeRanges are code point ranges fuzz strings draw from, by weight.
var runeRanges = []struct {
	lo, hi rune
	weight int
}{
	{0x20, 0x7e, 40},
	{0x09, 0x0d, 6},
	{0x00, 0x1f, 2},
	{0x80, 0xff, 5},
	{0x100, 0x24f, 4},
	{0x300, 0x36f, 5},
	{0x370, 0x3ff, 2},
	{0x400, 0x4ff, 3},
	{0x590, 0x6ff, 3},
	{0x900, 0x97f, 3},
	{0xe00, 0xe7f, 1},
	{0x1100, 0x11ff, 2},
	{0x1c80, 0x1c8f, 1},
	{0x2000, 0x206f, 4},
	{0x2070, 0x2bff, 3},
	{0x3000, 0x30ff, 4},
	{0x4e00, 0x9fff, 6},
	{0xac00, 0xd7a3, 4},
	{0xe000, 0xf8ff, 1},
	{0xfb00, 0xfdff, 1},
	{0xfe00, 0xfe0f, 1},
	{0xff00, 0xffef, 3},
	{0x10000, 0x1ffff, 2},
	{0x1f300, 0x1faff, 5},
	{0x20000, 0x2a6df, 1},
	{0xe0000, 0xe01ef, 1},
	{0xf0000, 0xf00ff, 1},
}

// corpus returns the differential test corpus: hand-written strings,
// fragment mixes, fuzz strings and long documents. It is deterministic.
func corpus() []string {
	rng := rand.New(rand.NewPCG(1, 2))
	out := append([]string(nil), handWritten...)
	for i := 0; len(out) < 2100; i++ {
		out = append(out, mix(rng, 1+rng.IntN(12+i%40)))
	}
	for range 3000 {
		out = append(out, fuzzString(rng, 1+rng.IntN(40)))
	}
	out = append(out, specialCases()...)
	out = append(out, documents(rng)...)
	return out
}

func mix(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(fragments[rng.IntN(len(fragments))])
	}
	return b.String()
}

func fuzzString(rng *rand.Rand, n int) string {
	total := 0
	for _, r := range runeRanges {
		total += r.weight
	}
	var b strings.Builder
	for range n {
		if rng.IntN(8) == 0 {
			b.WriteString(fragments[rng.IntN(len(fragments))])
			continue
		}
		w := rng.IntN(total)
		for _, r := range runeRanges {
			if w < r.weight {
				c := r.lo + rune(rng.IntN(int(r.hi-r.lo+1)))
				if c >= 0xd800 && c <= 0xdfff {
					c = 'x'
				}
				b.WriteRune(c)
				break
			}
			w -= r.weight
		}
	}
	return b.String()
}

// specialCases are long runs: combining marks past 30, whitespace, digits,
// punctuation, one long word.
func specialCases() []string {
	return []string{
		"a" + strings.Repeat("\u0301", 31), "e" + strings.Repeat("\u0316\u0301", 25) + "x",
		"o" + strings.Repeat("\u0308", 40) + "\u0323 text", strings.Repeat("\u0301", 35),
		"A" + strings.Repeat("\u030a\u0323", 20) + "\u0301", "\u1100" + strings.Repeat("\u0301", 32) + "\u1161",
		strings.Repeat(" ", 100), strings.Repeat(" ", 100) + "x", strings.Repeat("\n", 50), strings.Repeat(" \n", 40),
		strings.Repeat("\t ", 30) + "end", strings.Repeat("\u00a0", 20), strings.Repeat("\u3000", 20) + "字",
		strings.Repeat("9", 100), strings.Repeat("!", 100), strings.Repeat("ab", 200), strings.Repeat("字", 300),
		strings.Repeat("'s", 50), strings.Repeat("😀", 50), strings.Repeat("<|im_end|>", 10),
		strings.Repeat("abcdefghij", 500), strings.Repeat("▁", 64), strings.Repeat("-", 200) + "\n",
	}
}

// documents are long texts, up to 40k characters.
func documents(rng *rand.Rand) []string {
	prose := []string{
		"Anarchism is a political philosophy and movement that is skeptical of authority. ",
		"It calls for the abolition of the state, which it holds to be unnecessary.\n\n",
		"In 2024, the population grew by 1.5% to 8,100,000,000 people (est.). ",
		"She said, \"I don't think we'll make it before 10:30 p.m.\" ",
		"def f(x):\n    return x ** 2  # square\n\n",
		"東京は日本の首都です。人口は約1400万人です。", "서울은 한국의 수도입니다. ", "القاهرة هي عاصمة مصر. ",
		"दिल्ली भारत की राजधानी है। ", "Émile Zola écrivait « J'accuse… ». ", "👍🏽 Great job! 🎉🎉\n",
		"<|im_start|>assistant\nSure.<|im_end|>\n", "\t\t{\"id\": 17, \"tags\": [\"a\", \"b\"]},\n",
	}
	var docs []string
	for _, size := range []int{2000, 5000, 10000, 20000, 40000} {
		var b strings.Builder
		for b.Len() < size {
			b.WriteString(prose[rng.IntN(len(prose))])
		}
		docs = append(docs, truncateRunes(b.String(), size))
	}
	word := strings.Repeat("abcdefghijklmnopqrstuvwxyz", 1600) // a 40 KB word
	docs = append(docs, word, fmt.Sprint(strings.Repeat("x=1;", 5000)))
	return docs
}

func truncateRunes(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		r = r[:n]
	}
	return string(r)
}
