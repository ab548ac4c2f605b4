package luascript_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/clocktest"
	"github.com/stockkit/inventory/luascript"
)

// TestHoldClock: holds expire on Redis's clock (TIME), never the client's
// (clocktest.Run: the clock of a private Redis ten days behind, then
// ahead).
func TestHoldClock(t *testing.T) {
	clocktest.Run(t, func(t *testing.T) clocktest.At {
		at := clocktest.RedisAt(t)
		return func(now time.Time) clocktest.Manager {
			m, err := luascript.New(at(now))
			require.NoError(t, err)
			return m
		}
	})
}
