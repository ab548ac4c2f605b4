package rediskeys

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/driver"
)

func TestCRC16(t *testing.T) {
	require.Equal(t, uint16(0x31C3), crc16("123456789"), "CRC-16/XMODEM check value")
}

func TestSlotTags(t *testing.T) {
	for s, tag := range slotTags() {
		require.Equal(t, s, int(crc16(tag)%Slots), "tag %q", tag)
	}
}

// TestOrderKeysAreDistinct checks that the keys of holds never share a key
// with each other or with the stock keys, whatever the SKU or id holds.
func TestOrderKeysAreDistinct(t *testing.T) {
	seen := map[string]string{}
	add := func(k, what string) {
		t.Helper()
		if prev, ok := seen[k]; ok {
			t.Fatalf("%s and %s share the key %q", prev, what, k)
		}
		seen[k] = what
	}
	names := []string{"a", "a:1", "a}:s:b", "1:a", "{a}", "a:", ":e:a", "h:a", "k:a", "a}:m:a"}
	for _, s := range names {
		add(Stock("inv", s), "stock "+s)
		add(Holds("inv", s), "holds "+s)
		add(HoldMarker("inv", s), "marker "+s)
		add(Held("inv", s), "held "+s)
		add(Key("inv", s, driver.DirReduce, "x"), "key "+s)
		for _, kind := range []string{"h", "k", "r"} {
			add(Order("inv", kind, s), "order "+kind+" "+s)
			for _, r := range names {
				add(Part("inv", s, "0123456789abcdef:"+kind+":"+r), "part "+s+" "+kind+" "+r)
			}
		}
	}
	add(SweepIndex("inv"), "sweep index")
	add(SweepSlots("inv"), "sweep slots")
	for s := range Slots {
		add(SlotSweepIndex("inv", s), "slot index")
	}
}
