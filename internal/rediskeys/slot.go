package rediskeys

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Slot returns the Redis Cluster hash slot of every key of sku: CRC16
// (XMODEM) of its tag's 16 hex digits, mod [Slots]. Keys of SKUs with the
// same slot may share one script call on a Cluster.
func Slot(sku string) int {
	const digits = "0123456789abcdef"
	h := hash(sku)
	var crc uint16
	for i := 15; i >= 0; i-- {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^digits[(h>>(4*uint(i)))&0xf]]
	}
	return int(crc) % Slots
}

var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
