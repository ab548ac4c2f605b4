package faulttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

// Sale is a keyed flash sale with refunds, run while a fault strikes. Every
// buyer Reduces one unit with its own key; every Refund-th buyer that got a
// unit Returns it with its own key. Calls that fail are retried with the
// same key once the fault is over, so that each call ends known: it took
// effect (success, or ErrDuplicate on the retry) or it did not.
type Sale struct {
	Manager inventory.StockManager
	SKU     string
	Stock   int64
	Buyers  int
	// Refund makes every Refund-th successful buyer return its unit; 0: none.
	Refund int
	// CallTimeout bounds each call; the default is 2s.
	CallTimeout time.Duration
	// Workers bounds the calls in flight; the default is 64.
	Workers int
}

// Result is what a Sale saw.
type Result struct {
	Taken, Returned int64 // units moved by calls that took effect
	Final           int64
	Insufficient    int // Reduces refused for lack of stock
	Failed          int // calls that returned another error during the fault
	FailedApplied   int // of those, calls the retry showed had taken effect (ErrDuplicate)
	Errors          map[string]int
}

func (r Result) String() string {
	return fmt.Sprintf("taken %d, returned %d, left %d, refused %d; %d calls failed during the fault, %d of them had taken effect (resolved by key); errors: %v",
		r.Taken, r.Returned, r.Final, r.Insufficient, r.Failed, r.FailedApplied, r.Errors)
}

type call struct {
	dir driver.Direction
	key string
}

// Run runs the sale, calling fault once, concurrently, after the first
// quarter of the buyers started, then heal when every first attempt ended.
// It then retries every failed call with its key until it is known, and
// checks stock never went negative and initial - final == taken - returned.
func (s Sale) Run(t testing.TB, fault, heal func()) Result {
	t.Helper()
	if s.CallTimeout == 0 {
		s.CallTimeout = 2 * time.Second
	}
	if s.Workers == 0 {
		s.Workers = 64
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.Manager.Init(ctx, s.SKU, s.Stock); err != nil {
		t.Fatalf("init: %v", err)
	}
	var (
		mu      sync.Mutex
		res     = Result{Errors: map[string]int{}}
		pending []call
	)
	// do makes one attempt; it reports whether the call is settled.
	do := func(c call, retry bool) (took bool, settled bool) {
		cctx, ccancel := context.WithTimeout(ctx, s.CallTimeout)
		defer ccancel()
		var rem int64
		var err error
		if c.dir == driver.DirReduce {
			rem, err = s.Manager.Reduce(cctx, s.SKU, 1, inventory.WithKey(c.key))
		} else {
			rem, err = s.Manager.Return(cctx, s.SKU, 1, inventory.WithKey(c.key))
		}
		mu.Lock()
		defer mu.Unlock()
		if err == nil && rem < 0 {
			t.Errorf("%s %s returned negative stock %d", c.dir, c.key, rem)
		}
		switch {
		case err == nil, retry && errors.Is(err, inventory.ErrDuplicate):
			if err != nil {
				res.FailedApplied++
			}
			if c.dir == driver.DirReduce {
				res.Taken++
			} else {
				res.Returned++
			}
			return true, true
		case errors.Is(err, inventory.ErrInsufficientStock):
			res.Insufficient++
			return false, true
		case errors.Is(err, inventory.ErrDuplicate):
			t.Errorf("%s %s: first attempt reported a duplicate", c.dir, c.key)
			return false, true
		default:
			if errors.Is(err, inventory.ErrNotFound) {
				t.Errorf("%s %s: %v (the SKU was lost)", c.dir, c.key, err)
			}
			res.Errors[errClass(err)]++
			if !retry {
				res.Failed++
				pending = append(pending, c)
			}
			return false, false
		}
	}

	sem := make(chan struct{}, s.Workers)
	var wg sync.WaitGroup
	var once sync.Once
	faultDone := make(chan struct{})
	for i := range s.Buyers {
		if i == s.Buyers/4 {
			once.Do(func() { go func() { defer close(faultDone); fault() }() })
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			took, _ := do(call{driver.DirReduce, fmt.Sprintf("buy-%d", i)}, false)
			if took && s.Refund > 0 && i%s.Refund == 0 {
				do(call{driver.DirReturn, fmt.Sprintf("refund-%d", i)}, false)
			}
		}()
	}
	wg.Wait()
	<-faultDone
	heal()

	// Every failed call is retried with its key until it is known.
	for _, c := range pending {
		for {
			if _, settled := do(c, true); settled {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s %s never settled after the fault healed: %v", c.dir, c.key, res.Errors)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	err := Eventually(ctx, func() error {
		gctx, gcancel := context.WithTimeout(ctx, s.CallTimeout)
		defer gcancel()
		var err error
		res.Final, err = s.Manager.Get(gctx, s.SKU)
		return err
	})
	if err != nil {
		t.Fatalf("get after the fault: %v", err)
	}
	if res.Final < 0 {
		t.Errorf("stock went negative: %d", res.Final)
	}
	if s.Stock-res.Final != res.Taken-res.Returned {
		t.Errorf("invariant broken: initial %d - final %d = %d, taken %d - returned %d = %d",
			s.Stock, res.Final, s.Stock-res.Final, res.Taken, res.Returned, res.Taken-res.Returned)
	}
	t.Logf("%s", res)
	return res
}

func errClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, inventory.ErrContention):
		return "contention"
	}
	return "other"
}
