package tiered

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// Where a key's record in SQL came from (the src column of the keys table).
const (
	srcRedis = "redis" // a move Redis journaled, recorded by the syncer
	srcSQL   = "sql"   // a move of the fallback
)

// keyedConfig is what [WithKeyedFallback] and [WithDoubleApplied] set.
type keyedConfig struct {
	on, giveBack bool
	onPair       func(DoubleApply)
}

// WithKeyedFallback lets the fallback serve keyed calls (Reduce and Return
// with [inventory.WithKey]) from SQL's own pool while the circuit to Redis
// is open, rather than refuse them with [ErrRedisUnreachable] (the
// default).
//
// SQL keeps a record of every key: the syncer records the keys of the
// moves it syncs from Redis's journal, in the transaction that applies
// them, and the fallback checks and records a key in the transaction that
// moves the pool, so a key SQL knows is honoured ([inventory.ErrDuplicate],
// with the remaining stock the first call returned). A key Redis applied
// but had not synced when it became unreachable is unknown to SQL, and
// the fallback applies it a second time: a duplicate sale to one buyer,
// not an oversell, since the two moves drew from disjoint units (Redis's
// allotment and SQL's pool). Every such pair is found when the syncer
// applies Redis's entry, and reported: to [WithDoubleApplied]'s function
// and in the SKU's next [Drift] (DoubleApplied). With giveBack, the syncer
// also gives the units of the move it met second back to SQL's pool, in
// the same transaction, as a fallback Return would (a Return's pair takes
// its units back out of the pool, when the pool has them): the buyer is
// then served once, and Reconcile stays clean.
//
// The recovery copies the keys the fallback recorded into Redis before the
// circuit closes, so a retry that reaches Redis afterwards is refused
// there; a key the fallback records after its SKU's pass, and that reaches
// Redis, is a pair found by the syncer as above. A key's record in SQL
// expires after the key TTL ([WithKeyTTL]): from the move, on Redis's
// clock for the moves Redis made, on this process's clock for the
// fallback's.
func WithKeyedFallback(giveBack bool) Option {
	return func(c *config) { c.keyed.on, c.keyed.giveBack = true, giveBack }
}

// WithDoubleApplied sets the function the syncer calls, after its
// transaction commits, for every key it finds applied twice (see
// [WithKeyedFallback]). It runs on the syncer's goroutine: it should
// return quickly. A process that dies between the commit and the call
// does not call it; the SKU's next [Drift] counts every pair.
func WithDoubleApplied(f func(DoubleApply)) Option {
	return func(c *config) { c.keyed.onPair = f }
}

// DoubleApply is one key applied twice: once by a move SQL had recorded
// (First: "sql" for the fallback, "redis" for a move synced before, as
// after Redis forgot its records), and once by the move of Redis's journal
// entry Entry, which the syncer met second.
type DoubleApply struct {
	SKU   string
	Key   string
	Dir   driver.Direction
	First string
	Entry string
	// Qty is the units the move met second took (a Return's too).
	Qty int64
	// GivenBack is the units given back to SQL's pool for this pair
	// (WithKeyedFallback(true)); 0 when not asked for, when the pair is
	// of an older generation (before an Init), or when the pool could not
	// take them (past MaxStock) or give them (a Return's, the pool short).
	GivenBack int64
}

// keyMove is a keyed move of a journal entry (keyitem in holds.lua).
type keyMove struct {
	dir       driver.Direction
	key       string
	qty, rem  int64
	entry     string
	ms, gen   int64
	givenBack int64
}

// keyID names a key's record: a key is applied once per direction.
type keyID struct {
	dir driver.Direction
	key string
}

// keyRecord is a key's record in SQL.
type keyRecord struct {
	rem     int64
	src     string
	expires int64 // ms
}

// entryKeys reads the k field of a journal entry: items "q rem key"
// joined by newlines. An entry without k has no keyed move.
func entryKeys(v map[string]any) ([]keyMove, error) {
	k, ok := v["k"].(string)
	if !ok {
		return nil, nil
	}
	items := strings.Split(k, "\n")
	out := make([]keyMove, 0, len(items))
	for _, it := range items {
		q, rest, ok1 := strings.Cut(it, " ")
		rem, key, ok2 := strings.Cut(rest, " ")
		qn, err1 := strconv.ParseInt(q, 10, 64)
		rn, err2 := strconv.ParseInt(rem, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || qn == 0 || key == "" {
			return nil, fmt.Errorf("keyed move %q", it)
		}
		dir := driver.DirReduce
		if qn < 0 {
			dir = driver.DirReturn
		}
		out = append(out, keyMove{dir: dir, key: key, qty: qn, rem: rn})
	}
	return out, nil
}

// maxKeyRows bounds the keys one statement reads or writes.
const maxKeyRows = 1000

// findKeys returns the records of sku's keys in SQL, expired ones
// included (their expires_ms tells).
func (m *Manager) findKeys(ctx context.Context, tx *sqlx.Tx, sku string, ids []keyID) (map[keyID]keyRecord, error) {
	found := make(map[keyID]keyRecord, len(ids))
	seen := make(map[string]bool, len(ids))
	var keys []string
	for _, id := range ids {
		if !seen[id.key] {
			seen[id.key] = true
			keys = append(keys, id.key)
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), maxKeyRows)
		args := []any{sku}
		for _, k := range keys[:n] {
			args = append(args, k)
		}
		keys = keys[n:]
		rows, err := tx.QueryxContext(ctx, m.db.Rebind(m.q.keysFind+groups(n, 1)), args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id keyID
			var r keyRecord
			if err := rows.Scan(&id.dir, &id.key, &r.rem, &r.src, &r.expires); err != nil {
				rows.Close()
				return nil, err
			}
			found[id] = r
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// putKeys records keys of sku (seven values per key, as keysPut lists
// them), overwriting expired records.
func (m *Manager) putKeys(ctx context.Context, tx *sqlx.Tx, vals []any) error {
	const cols = 7
	for len(vals) > 0 {
		n := min(len(vals)/cols, maxKeyRows)
		if _, err := tx.ExecContext(ctx, m.db.Rebind(m.q.keysPut+groups(n, cols)+m.q.keysPutEnd), vals[:n*cols]...); err != nil {
			return err
		}
		vals = vals[n*cols:]
	}
	return nil
}

// syncKeys records the keys of the keyed moves of fresh (entries of sku the
// syncer applies in tx, the SKU's row locked) and returns the pairs: the
// moves whose key SQL already had a live record of, or that an earlier
// move of fresh applied. It deletes the SKU's expired records first, and
// settles the pairs (settlePairs).
func (m *Manager) syncKeys(ctx context.Context, tx *sqlx.Tx, sku string, fresh []syncEntry) ([]DoubleApply, error) {
	var moves []keyMove
	for _, e := range fresh {
		for _, k := range e.keys {
			k.entry, k.ms, k.gen = e.id, e.ms, e.gen
			moves = append(moves, k)
		}
	}
	if len(moves) == 0 {
		return nil, nil
	}
	if _, err := tx.ExecContext(ctx, m.q.keysExpire, sku, time.Now().UnixMilli()); err != nil {
		return nil, err
	}
	ids := make([]keyID, len(moves))
	for i, k := range moves {
		ids[i] = keyID{k.dir, k.key}
	}
	found, err := m.findKeys(ctx, tx, sku, ids)
	if err != nil {
		return nil, err
	}
	var vals []any
	var pairs []keyMove
	firsts := map[keyID]string{}
	for i, k := range moves {
		if r, ok := found[ids[i]]; ok && r.expires > k.ms {
			firsts[ids[i]] = r.src
			pairs = append(pairs, k)
			continue
		}
		exp := k.ms + m.cfg.keyTTL.Milliseconds()
		found[ids[i]] = keyRecord{rem: k.rem, src: srcRedis, expires: exp}
		vals = append(vals, sku, string(k.dir), k.key, k.qty, k.rem, srcRedis, exp)
	}
	if err := m.putKeys(ctx, tx, vals); err != nil {
		return nil, err
	}
	if err := m.settlePairs(ctx, tx, sku, pairs); err != nil {
		return nil, err
	}
	out := make([]DoubleApply, len(pairs))
	for i, k := range pairs {
		out[i] = DoubleApply{SKU: sku, Key: k.key, Dir: k.dir, First: firsts[keyID{k.dir, k.key}], Entry: k.entry, Qty: k.qty, GivenBack: k.givenBack}
	}
	return out, nil
}

// settlePairs counts pairs in sku's row and, with WithKeyedFallback(true),
// gives back each pair's units to the pool (a Reduce's) or takes them out
// of it (a Return's), as a fallback Return or Reduce would, when the pool
// allows and the pair is of the row's generation; it sets each pair's
// givenBack.
func (m *Manager) settlePairs(ctx context.Context, tx *sqlx.Tx, sku string, pairs []keyMove) error {
	if len(pairs) == 0 {
		return nil
	}
	var delta, given int64
	if m.cfg.keyed.giveBack {
		var pool, gen, doubled, givenBefore int64
		if err := tx.QueryRowxContext(ctx, m.q.pairsRead, sku).Scan(&pool, &gen, &doubled, &givenBefore); err != nil {
			return err
		}
		for i := range pairs {
			q := pairs[i].qty
			if pairs[i].gen != gen || pool+q < 0 || pool+q > inventory.MaxStock {
				continue
			}
			pool += q
			delta += q
			pairs[i].givenBack = max(q, -q)
			given += pairs[i].givenBack
		}
	}
	_, err := tx.ExecContext(ctx, m.q.pairs, delta, delta, len(pairs), given, sku)
	return err
}

// reportPairs calls WithDoubleApplied's function for pairs.
func (m *Manager) reportPairs(pairs []DoubleApply) {
	if m.cfg.keyed.onPair == nil {
		return
	}
	for _, p := range pairs {
		m.cfg.keyed.onPair(p)
	}
}

// copyKeys copies into Redis the live records of sku's keys the fallback
// wrote, before Redis takes the SKU's traffic again (recovery), so that a
// retry reaching Redis is refused there. A record Redis has is kept.
func (m *Manager) copyKeys(ctx context.Context, sku string) error {
	if !m.cfg.keyed.on {
		return nil
	}
	type rec struct {
		Dir     string `db:"dir"`
		K       string `db:"k"`
		Rem     int64  `db:"rem"`
		Expires int64  `db:"expires_ms"`
	}
	var recs []rec
	now := time.Now().UnixMilli()
	if err := m.db.SelectContext(ctx, &recs, m.q.keysLive, sku, now); err != nil {
		return fmt.Errorf("copy keys of %q: %w", sku, err)
	}
	for len(recs) > 0 {
		n := min(len(recs), maxKeyRows)
		_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, r := range recs[:n] {
				ttl := time.Duration(r.Expires-now) * time.Millisecond
				p.SetNX(ctx, rediskeys.Key(m.cfg.prefix, sku, driver.Direction(r.Dir), r.K), strconv.FormatInt(r.Rem, 10), ttl)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("copy keys of %q: %w", sku, withCtx(ctx, err))
		}
		recs = recs[n:]
	}
	return nil
}
