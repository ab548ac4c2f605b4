package rediskeys

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/stockkit/inventory"
)

// EncodeLines is the lines of an order record as its scripts keep them,
// "QTY SKU\n" each (luascript's orders.lua, tiered's record.lua).
func EncodeLines(lines []inventory.Line) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(strconv.FormatInt(l.Qty, 10) + " " + l.SKU + "\n")
	}
	return b.String()
}

// DecodeLines reads back what [EncodeLines] wrote.
func DecodeLines(s string) ([]inventory.Line, error) {
	var lines []inventory.Line
	for l := range strings.SplitSeq(strings.TrimSuffix(s, "\n"), "\n") {
		q, sku, ok := strings.Cut(l, " ")
		n, err := strconv.ParseInt(q, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("order record holds a bad line %q", l)
		}
		lines = append(lines, inventory.Line{SKU: sku, Qty: n})
	}
	return lines, nil
}

// Remaining is the remaining stock an idempotency key's record holds (see
// [Key]): its digits, which a record of an earlier writer follows with ":"
// and the writing call's token.
func Remaining(rec string) (int64, error) {
	digits, _, _ := strings.Cut(rec, ":")
	return strconv.ParseInt(digits, 10, 64)
}

// NewNonce returns 16 random hex digits: the nonce of one attempt of an
// order, which names its record's attempt and its parts (see [Part]).
func NewNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
