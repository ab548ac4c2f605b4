package rediskeys

// SegmentTag returns the hash tag, "{...}", of segment i (0..n-1) of sku's
// n segments (package segment's Redis layout): a tag whose keys hash to
// [SegmentSlot], so that the n segments of one SKU sit at even distances
// around the slot space and, on a Cluster whose masters own equal runs of
// slots, spread evenly over them.
func SegmentTag(sku string, i, n int) string {
	return "{" + slotTags()[SegmentSlot(sku, i, n)] + "}"
}

// SegmentSlot is the slot of segment i of sku's n segments:
// (Slot(sku) + (2i+1)·Slots/2n) mod Slots.
func SegmentSlot(sku string, i, n int) int {
	return (Slot(sku) + (2*i+1)*Slots/(2*n)) % Slots
}
