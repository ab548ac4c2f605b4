package rediskeys

import (
	"strconv"
	"sync"
)

// Keys of holds (inventory.OrderManager). Every key of one SKU keeps the
// SKU's hash tag; a hold's record has the tag of its id; a part (the lines
// of one hold in one Cluster slot) has the tag of its first SKU; the sweep
// index of a Cluster slot has a tag that hashes to that slot.

// Holds is the sorted set of the holds (parts) on sku, scored by the
// millisecond on the Redis clock at which they fall due: PREFIX{tag}:e:SKU.
// It exists only while sku has holds, so a script can tell a SKU without
// holds with one lookup.
func Holds(prefix, sku string) string {
	return prefix + tag(sku) + ":e:" + sku
}

// HoldMarker is the earliest score of the holds set of sku, a string that
// exists exactly when the set does, so that a script reads it in the same
// MGET as the stock: PREFIX{tag}:m:SKU.
func HoldMarker(prefix, sku string) string {
	return prefix + tag(sku) + ":m:" + sku
}

// Held is the number of units of sku in holds not yet released, as a
// decimal integer string, absent when none: PREFIX{tag}:h:SKU.
func Held(prefix, sku string) string {
	return prefix + tag(sku) + ":h:" + sku
}

// Order is the record of a hold or of a multi-SKU call, named by kind (one
// byte: "h" for a hold, "k" for a keyed lines call with its direction in
// id, "r" for an unkeyed lines call) and id: PREFIX{tag}:o:KIND:ID, with the
// tag of KIND:ID.
func Order(prefix, kind, id string) string {
	return prefix + tag(kind+":"+id) + ":o:" + kind + ":" + id
}

// Part is the part of the order record rec that holds lines in the slot of
// sku, sku being the first of those lines: PREFIX{tag}:p:LEN:SKU:REC. The
// length makes it unambiguous.
func Part(prefix, sku, rec string) string {
	return prefix + tag(sku) + ":p:" + strconv.Itoa(len(sku)) + ":" + sku + ":" + rec
}

// SweepIndex is the sorted set of the parts due for release on one
// standalone Redis, scored by when they fall due: PREFIX:x.
func SweepIndex(prefix string) string { return prefix + ":x" }

// SlotSweepIndex is the sweep index of one Redis Cluster slot:
// PREFIX{T}:x, T being a tag that hashes to slot.
func SlotSweepIndex(prefix string, slot int) string {
	return prefix + "{" + slotTags()[slot] + "}:x"
}

// SweepSlots is the sorted set of the Cluster slots whose sweep index may
// hold parts, scored by when a writer last named the slot (Redis TIME, ms):
// PREFIX{sweep}:xs. Sweep visits these slots only.
func SweepSlots(prefix string) string { return prefix + "{sweep}:xs" }

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Slot returns the Redis Cluster hash slot of every key of sku.
func Slot(sku string) int {
	t := tag(sku)
	return int(crc16(t[1:len(t)-1]) % Slots)
}

// OrderSlot returns the slot of Order(prefix, kind, id).
func OrderSlot(kind, id string) int { return Slot(kind + ":" + id) }

var (
	slotTagsOnce sync.Once
	slotTagList  []string
)

// slotTags returns, for each slot, the shortest decimal string that hashes
// to it (computed once: about 170,000 CRC16s).
func slotTags() []string {
	slotTagsOnce.Do(func() {
		slotTagList = make([]string, Slots)
		left := Slots
		for i := 0; left > 0; i++ {
			s := strconv.Itoa(i)
			if h := crc16(s) % Slots; slotTagList[h] == "" {
				slotTagList[h] = s
				left--
			}
		}
	})
	return slotTagList
}

// crc16 is CRC-16/XMODEM, Redis Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
