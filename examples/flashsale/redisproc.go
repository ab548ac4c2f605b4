package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisProc is a private redis-server that -kill-redis-at may SIGKILL: it
// keeps its data in an append-only file synced on every write, in a
// directory of its own, so a restart loses nothing it acknowledged. The
// shared Redis of -redis is never killed.
type redisProc struct {
	dir  string
	port int
	cmd  *exec.Cmd
}

// startRedis starts a private redis-server on a free loopback port.
func startRedis(ctx context.Context) (*redisProc, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("-kill-redis-at starts a private redis-server: %w (install redis-server, or `make services`)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "flashsale-redis-")
	if err != nil {
		return nil, err
	}
	p := &redisProc{dir: dir, port: port}
	if err := p.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

func (p *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// start starts the server (again, after kill) and waits until it answers.
func (p *redisProc) start(ctx context.Context) error {
	p.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(p.port), "--dir", p.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", filepath.Join(p.dir, "redis.log"))
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		// A restart answers LOADING until it has read its AOF.
		if err := c.Ping(ctx).Err(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			p.kill()
			return fmt.Errorf("redis-server on %s did not answer: %w", p.addr(), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// client is a client of the private server, set as the sale's others.
func (p *redisProc) client(cfg *config) redis.UniversalClient {
	return redis.NewClient(&redis.Options{Addr: p.addr(), PoolSize: min(cfg.concurrency, 256), PoolTimeout: cfg.timeout,
		ContextTimeoutEnabled: true})
}

// kill stops the server with SIGKILL, as a crash would.
func (p *redisProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// stop kills the server and removes its directory.
func (p *redisProc) stop() {
	p.kill()
	os.RemoveAll(p.dir)
}
