package zklock

// Dir is the lock directory of name under root.
func Dir(root, name string) string {
	return (&locker{cfg: config{root: root}}).dir(name)
}
