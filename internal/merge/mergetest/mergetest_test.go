package mergetest

import (
	"errors"
	"runtime"
	"testing"

	"github.com/stockkit/inventory"
)

// recorder is a testing.TB that notes a failure instead of failing.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) FailNow()              { r.failed = true; runtime.Goexit() }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }

// fails reports whether check fails its TB.
func fails(t *testing.T, check func(t testing.TB)) bool {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.failed
}

// TestChecksCanFail gives each check answers and counts that are right,
// and then wrong in each way it checks: it passes the first only.
func TestChecksCanFail(t *testing.T) {
	insufficient := inventory.ErrInsufficientStock
	// Stock 2: "a" sold (1 left), "b" sold (0 left), a duplicate of "a",
	// "c" refused.
	good := []Answer{{"a", 1, nil}, {"b", 0, nil}, {"a", 1, inventory.ErrDuplicate}, {"c", 0, insufficient}}
	answers := map[string][]Answer{
		"sold twice":          {{"a", 1, nil}, {"a", 0, nil}},
		"a remaining twice":   {{"a", 1, nil}, {"b", 1, nil}},
		"a remaining missing": {{"a", 1, nil}, {"b", 1, insufficient}},
		"duplicate unsold":    {{"a", 1, nil}, {"b", 0, nil}, {"c", 1, inventory.ErrDuplicate}},
		"duplicate's left":    {{"a", 1, nil}, {"b", 0, nil}, {"a", 0, inventory.ErrDuplicate}},
		"refused's left":      {{"a", 1, nil}, {"b", 0, nil}, {"c", 1, insufficient}},
		"other error":         {{"a", 1, nil}, {"b", 0, nil}, {"c", 0, errors.New("boom")}},
	}
	if fails(t, func(t testing.TB) { CheckAnswers(t, 2, good) }) {
		t.Fatal("CheckAnswers refused right answers")
	}
	for name, a := range answers {
		if !fails(t, func(t testing.TB) { CheckAnswers(t, 2, a) }) {
			t.Errorf("CheckAnswers passed %s: %v", name, a)
		}
	}

	if fails(t, func(t testing.TB) { CheckMerged(t, 10, 2, []int{2, 4, 2}, 4) }) {
		t.Fatal("CheckMerged refused merged calls")
	}
	for name, c := range map[string]struct {
		single  int
		batches []int
	}{
		"no batch":            {10, nil},
		"as many as calls":    {9, []int{2}},
		"batch past the max":  {1, []int{5, 4}},
		"a batch of one call": {1, []int{1, 4, 4}},
	} {
		if !fails(t, func(t testing.TB) { CheckMerged(t, 10, c.single, c.batches, 4) }) {
			t.Errorf("CheckMerged passed %s: %+v", name, c)
		}
	}

	lone := func(dupOK bool, single int, batches []int) func(t testing.TB) {
		return func(t testing.TB) {
			seen := map[string]bool{}
			CheckLoneCalls(t, 5, 3, func(key string) error {
				if seen[key] && !dupOK {
					return inventory.ErrDuplicate
				}
				seen[key] = true
				return nil
			}, func() (int, []int) { return single, batches })
		}
	}
	if fails(t, lone(false, 5, nil)) {
		t.Fatal("CheckLoneCalls refused lone calls")
	}
	if !fails(t, lone(true, 5, nil)) {
		t.Error("CheckLoneCalls passed a repeated key that moved")
	}
	if !fails(t, lone(false, 5, []int{2})) {
		t.Error("CheckLoneCalls passed a batch")
	}
	if !fails(t, lone(false, 4, nil)) {
		t.Error("CheckLoneCalls passed fewer script calls than calls")
	}
}

// TestBuyers checks that Buyers calls once per buyer, with a quarter of
// the keys twice, and keeps each call's answer with its key.
func TestBuyers(t *testing.T) {
	answers := Buyers(8, func(key string) (int64, error) { return int64(key[len(key)-1] - '0'), nil })
	keys := map[string]int{}
	for _, a := range answers {
		keys[a.Key]++
		if want := int64(a.Key[len(a.Key)-1] - '0'); a.Left != want {
			t.Errorf("answer %+v is not its own call's", a)
		}
	}
	if len(keys) != 6 || keys["buyer-0"] != 2 || keys["buyer-1"] != 2 {
		t.Errorf("keys %v: want buyer-0..5, buyer-0 and buyer-1 twice", keys)
	}
}
