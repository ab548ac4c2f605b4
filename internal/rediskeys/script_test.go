package rediskeys_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/lateness"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// scriptServer speaks just enough RESP for go-redis to connect, and answers
// EVALSHA with TRYAGAIN while tryAgain is above zero (counting it down),
// then with :7. It counts the EVALSHAs.
type scriptServer struct {
	tryAgain atomic.Int64
	evals    atomic.Int64
}

func (s *scriptServer) start(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func (s *scriptServer) serve(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch strings.ToLower(args[0]) {
		case "hello":
			reply = "-ERR unknown command 'hello'\r\n"
		case "evalsha":
			s.evals.Add(1)
			if s.tryAgain.Add(-1) >= 0 {
				reply = "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
			} else {
				reply = ":7\r\n"
			}
		default:
			reply = "+OK\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		v, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		args[i] = strings.TrimSuffix(v, "\r\n")
	}
	return args, nil
}

// TestScriptTryAgain: a script Redis refused with TRYAGAIN (a Cluster slot
// being migrated: it did not run) is sent again until Redis runs it; while
// Redis keeps refusing, the call returns within DeadlineSlack of its
// deadline (beyond the scheduler's delay), with both the refusal and ctx's
// error when the deadline found it pausing.
func TestScriptTryAgain(t *testing.T) {
	var srv scriptServer
	c := redis.NewClient(&redis.Options{Addr: srv.start(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	script := rediskeys.NewScript("return 7")

	srv.tryAgain.Store(3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd, _, err := script.Run(ctx, c, 0, 0, []string{"k"})
	require.NoError(t, err)
	require.EqualValues(t, 7, cmd.Val())
	require.EqualValues(t, 4, srv.evals.Load(), "three refusals, then the run")

	srv.tryAgain.Store(1 << 30)
	srv.evals.Store(0)
	const d = 300 * time.Millisecond
	_, err = lateness.CheckLate(t, "a script refused until its deadline", d, func(ctx context.Context) error {
		_, _, err := script.Run(ctx, c, 0, 0, []string{"k"})
		return err
	})
	require.Error(t, err)
	require.Greater(t, srv.evals.Load(), int64(3), "sent again while refused")
	// The deadline ends the call in a pause (the refusal and ctx's error),
	// or on a loaded machine in flight (the connection's timeout).
	if re := redis.Error(nil); errors.As(err, &re) {
		require.True(t, redis.HasErrorPrefix(re, "TRYAGAIN"), "the refusal: %v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
}
