// Package sqlite makes the integration module require modernc.org/sqlite,
// the driver that driver.go.in (an overlay the Makefile adds to
// internal/testenv) links into the root module's test binaries.
package sqlite

import _ "modernc.org/sqlite" // registers "sqlite"
