package rediskeys

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The resend window. go-redis sends a command again when a connection breaks
// before the reply arrives, though Redis may have run it. A call that may be
// sent again carries its Caller's id and a sequence number, and names the
// Window of the current minute; the script keeps, in that string, a ring of
// WindowSize unsigned 63-bit slots (BITFIELD), slot seq mod WindowSize
// holding the seq of the call that used it last. A copy of a call that ran
// is answered with the stock as it is then. No call is ever applied twice:
//
//   - a call's slot is written in the same script that applies the call, so
//     a later copy of it finds its own seq there and is answered;
//   - a slot is only ever overwritten by a larger seq (a call finding a
//     larger seq in its slot is refused, not applied), so a copy whose slot
//     was taken is refused.
//
// A Window expires WindowTTL after it was made (its TTL is set as it grows,
// at most WindowSize times), at least a minute after the last call that
// names it: a copy arriving later than a minute after its call ran would be
// applied again, as with any time-bounded record.
//
// Memory is fixed: at most two live Windows (this minute's and the last) per
// Caller and SKU it touched in the last two minutes, each at most
// WindowSize x 63 bits (32 KB) plus the key, whatever the call rate. A call is refused (an error whose outcome is unknown, which its
// idempotency key makes safe to retry) only when a call of the same Caller
// that is WindowSize or more sequence numbers later on the same bucket of
// SKUs reached Redis before it, as only a long-delayed resend does.
const (
	WindowSize = 4096
	WindowTTL  = 2 * time.Minute
)

// callerBuckets spreads a Caller's sequence numbers over SKUs, so that the
// window of one SKU counts (mostly) that SKU's calls.
const callerBuckets = 1024

// Caller names the calls of one Manager or Store for the resend window.
type Caller struct {
	ID   string // 16 hex digits, random
	seqs [callerBuckets]atomic.Uint64
}

// NewCaller returns a Caller with a fresh random id.
func NewCaller() *Caller {
	b := make([]byte, 8)
	rand.Read(b)
	return &Caller{ID: hex.EncodeToString(b)}
}

// Next returns the next sequence number of a call on sku, from 1.
func (c *Caller) Next(sku string) string {
	return strconv.FormatUint(c.seqs[hash(sku)%callerBuckets].Add(1), 10)
}

// Window returns the key of this Caller's resend window on sku for the
// current minute.
func (c *Caller) Window(prefix, sku string) string {
	return Window(prefix, sku, c.ID, time.Now().Unix()/60)
}

// Token returns a string unique to one call of this Caller on sku, kept with
// an idempotency key so that a resent keyed call is told from a retry.
func (c *Caller) Token(sku string) string { return c.ID + "." + c.Next(sku) }

// Resends reports whether client may send a command again after losing its
// reply: a *redis.Client retries on a broken connection unless its MaxRetries
// is -1 (0 once the client is made); cluster and other clients retry through
// redirects too, so they are taken to resend.
func Resends(client redis.UniversalClient) bool {
	if c, ok := client.(*redis.Client); ok {
		return c.Options().MaxRetries > 0
	}
	return true
}

// ErrReplicas is wrapped by the error of a write that Redis applied but that
// fewer replicas than asked acknowledged within the timeout. Its outcome is
// unknown: a failover before the replicas catch up may lose it.
var ErrReplicas = errors.New("fewer replicas acknowledged the write than asked")

// waiter is the WAIT command, which go-redis's Pipeliner interface lacks
// though every pipeline has it (it sets the read timeout WAIT needs).
type waiter interface {
	Wait(ctx context.Context, numReplicas int, timeout time.Duration) *redis.IntCmd
}

// Replicated sends the commands fn queues, then WAIT replicas timeout, in one
// pipeline on one connection to the server that holds key (WAIT counts the
// replicas that have that connection's writes). It returns how many replicas
// acknowledged; the caller reads its commands' results from the commands fn
// queued. On a Cluster client the pipeline goes to the master of key's slot.
func Replicated(ctx context.Context, client redis.UniversalClient, key string, replicas int, timeout time.Duration,
	fn func(p redis.Pipeliner)) (int64, error) {
	var c redis.Cmdable = client
	if cc, ok := client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return 0, err
		}
		c = node
	}
	var wait *redis.IntCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		fn(p)
		w, ok := p.(waiter)
		if !ok {
			return fmt.Errorf("redis pipeline %T has no WAIT", p)
		}
		wait = w.Wait(ctx, replicas, timeout)
		return nil
	})
	if wait == nil {
		return 0, err
	}
	if err != nil && wait.Err() == nil {
		return 0, nil // a queued command failed; the caller reads its error
	}
	if err := wait.Err(); err != nil {
		return 0, fmt.Errorf("wait for %d replicas: %w", replicas, err)
	}
	return wait.Val(), nil
}

// Run runs script; when replicas > 0 it then waits, on the same connection,
// for that many replicas (see [Replicated]) and returns how many
// acknowledged. The script's own error is returned as the error.
func Run(ctx context.Context, client redis.UniversalClient, script *redis.Script, replicas int, timeout time.Duration,
	keys []string, args ...any) (*redis.Cmd, int64, error) {
	if replicas == 0 {
		cmd := script.Run(ctx, client, keys, args...)
		return cmd, 0, cmd.Err()
	}
	var cmd *redis.Cmd
	eval := script.EvalSha
	for {
		acked, err := Replicated(ctx, client, keys[0], replicas, timeout, func(p redis.Pipeliner) {
			cmd = eval(ctx, p, keys, args...)
		})
		if cmd != nil && cmd.Err() != nil {
			err = cmd.Err()
		}
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			eval = script.Eval // once: EVAL loads the script
			continue
		}
		return cmd, acked, err
	}
}
