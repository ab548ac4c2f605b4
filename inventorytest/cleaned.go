package inventorytest

import (
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

// badSKUsOn returns SKUs that every call must refuse with
// ErrInvalidArgument, by what is wrong with them. Each but the empty one
// begins with base (a valid SKU, "" for none), so that the valid SKUs a
// careless manager might make of them ([cleanedUp]) are unique to the
// caller too, and the suite can seed and check them.
func badSKUsOn(base string) map[string]string {
	fill := func(n int) int { return max(n-len(base), 1) } // bytes to add to reach n
	long := inventory.MaxSKULen + 1
	return map[string]string{
		"empty":     "",
		"256 bytes": base + strings.Repeat("x", fill(long)),
		// 256 bytes; its last rune ends at byte 256, so cutting at
		// MaxSKULen bytes leaves invalid UTF-8 and cutting at a rune
		// boundary leaves 253 bytes.
		"256 bytes CJK":          base + strings.Repeat("X", fill(long-3)) + "鞋",
		"invalid UTF-8":          base + "shoe\xff",
		"invalid UTF-8 in NFD":   base + "Cafe\u0301\xff",
		"lone surrogate":         base + "a\xed\xa0\x80",
		"truncated rune":         base + "鞋"[:2],
		"NUL":                    base + "a\x00b",
		"NUL inside a sequence":  base + "Re\x00\u0301sume", // NFC after stripping: Résume
		"newline":                base + "a\nb",
		"tab":                    base + "a\tb",
		"carriage ret":           base + "a\r",
		"trailing newline":       base + "\n",
		"leading tab":            "\t" + base + "Lead",
		"padded":                 " \t" + base + "Pad \n",
		"DEL":                    base + "a\x7f",
		"C1 control":             base + "a\u0085b",
		"escape":                 base + "\x1b[31mRed",
		"escape, 256 bytes":      base + "\x1b" + strings.Repeat("Y", fill(long-1)),
		"invalid UTF-8, 256 B":   base + "\xff" + strings.Repeat("Z", fill(long-1)),
		"control at MaxSKULen+1": base + strings.Repeat("W", fill(inventory.MaxSKULen)) + "\x00",
	}
}

// cleanup is one way a careless manager makes a valid SKU of an invalid
// one, and then writes that SKU, which the caller never named, before or
// instead of refusing the call.
type cleanup struct {
	name string
	fn   func(string) string
}

// cleanups are the usual sanitisers: trimming, dropping or replacing
// control characters and invalid UTF-8, truncating to MaxSKULen bytes,
// folding case and normalising Unicode (NFC and NFD of the accented
// letters badSKUsOn uses: the suite takes no dependency for Unicode
// normalisation).
var cleanups = []cleanup{
	{"trimmed", strings.TrimSpace},
	{"control characters trimmed", func(s string) string { return strings.TrimFunc(s, unicode.IsControl) }},
	{"control characters dropped", func(s string) string { return mapControls(s, "") }},
	{"control characters as spaces", func(s string) string { return mapControls(s, " ") }},
	{"control characters as _", func(s string) string { return mapControls(s, "_") }},
	{"cut at MaxSKULen bytes", func(s string) string { return s[:min(len(s), inventory.MaxSKULen)] }},
	{"cut at a rune boundary within MaxSKULen bytes", cutRunes},
	{"invalid UTF-8 replaced by U+FFFD", func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }},
	{"invalid UTF-8 replaced by ?", func(s string) string { return strings.ToValidUTF8(s, "?") }},
	{"invalid UTF-8 dropped", func(s string) string { return strings.ToValidUTF8(s, "") }},
	{"lower-cased", strings.ToLower},
	{"upper-cased", strings.ToUpper},
	{"NFC", strings.NewReplacer("e\u0301", "\u00e9", "E\u0301", "\u00c9").Replace},
	{"NFD", strings.NewReplacer("\u00e9", "e\u0301", "\u00c9", "E\u0301").Replace},
}

// mapControls replaces each control character of s by with, leaving
// invalid bytes as they are.
func mapControls(s, with string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError && unicode.IsControl(r) {
			b.WriteString(with)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// cutRunes cuts s to at most MaxSKULen bytes without splitting a rune.
func cutRunes(s string) string {
	if len(s) <= inventory.MaxSKULen {
		return s
	}
	s = s[:inventory.MaxSKULen]
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		if r, n := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || n != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// cleanedUp returns the valid SKUs that a careless manager might write for
// bad, each with how it was made: every chain of up to three cleanups
// (trimmed, then lower-cased, ...), the SKUs they give that are valid.
func cleanedUp(bad string) map[string]string {
	how := map[string]string{bad: ""}
	frontier := []string{bad}
	for range 3 {
		var next []string
		for _, s := range frontier {
			for _, c := range cleanups {
				v := c.fn(s)
				if _, ok := how[v]; ok {
					continue
				}
				how[v] = strings.TrimPrefix(how[s]+", "+c.name, ", ")
				next = append(next, v)
			}
		}
		frontier = next
	}
	out := make(map[string]string)
	for v, h := range how {
		if driver.ValidateSKU(v) == nil {
			out[v] = h
		}
	}
	return out
}

// cleanedSKUs is cleanedUp of every bad SKU, by bad SKU, in a stable order.
func cleanedSKUs(bad map[string]string) (names []string, variants map[string][]string, how map[string]string) {
	names = slices.Sorted(maps.Keys(bad))
	variants = make(map[string][]string, len(bad))
	how = make(map[string]string)
	for _, name := range names {
		c := cleanedUp(bad[name])
		variants[name] = slices.Sorted(maps.Keys(c))
		for v, h := range c {
			if _, ok := how[v]; !ok {
				how[v] = h + " of " + name
			}
		}
	}
	return names, variants, how
}
