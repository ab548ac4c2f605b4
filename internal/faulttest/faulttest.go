// Package faulttest breaks real servers for the reliability tests: private
// Redis and ZooKeeper processes that a test may kill and restart without
// disturbing other packages' tests, an in-process toxiproxy between a client
// and its server, and a sale runner that checks the invariant
// initial - final == taken - returned after retrying every failed call with
// its idempotency key.
package faulttest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockkit/inventory/internal/testenv"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Process is a server process owned by one test.
type Process struct {
	t     testing.TB
	name  string
	argv  []string
	addr  string
	ready func() error

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Addr is the server's host:port.
func (p *Process) Addr() string { return p.addr }

func (p *Process) start() {
	p.t.Helper()
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log, err := os.Create(filepath.Join(p.t.TempDir(), p.name+".log"))
	if err != nil {
		p.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	deadline := time.Now().Add(2 * time.Minute) // a bound for a broken run only: a loaded machine starts a JVM slowly
	for {
		err := p.ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			p.t.Fatalf("%s at %s did not become ready: %v\n%s", p.name, p.addr, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill stops the server at once with SIGKILL, as a crash would.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	// Wait for the rest of the group too (a server forked by runuser, its
	// backends): until they are gone, a restart finds their lock file
	// (PostgreSQL's postmaster.pid) held.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if err := syscall.Kill(-cmd.Process.Pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.t.Errorf("%s: processes of its group still alive a minute after SIGKILL", p.name)
}

// Start starts the server again after Kill, on the same port and data.
func (p *Process) Start() { p.start() }

// Restart is Kill then Start.
func (p *Process) Restart() {
	p.Kill()
	p.start()
}

// Pause stops the server with SIGSTOP; Resume continues it.
func (p *Process) Pause() { p.signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (p *Process) Resume() { p.signal(syscall.SIGCONT) }

func (p *Process) signal(s syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, s)
	}
}

func require(t testing.TB, bin string) string {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		testenv.Missing(t, bin, err)
	}
	return path
}

// StartRedis starts a private redis-server on a free port that keeps its data
// in an append-only file synced on every write, so a kill and restart loses
// nothing that was acknowledged. Extra command-line options (args, such as
// "--appendfsync", "everysec") follow those and override them, at every
// start. It is killed when t ends.
func StartRedis(t testing.TB, args ...string) *Process {
	t.Helper()
	bin := require(t, "redis-server")
	port := FreePort(t)
	dir := t.TempDir()
	p := &Process{t: t, name: "redis-" + strconv.Itoa(port), addr: "127.0.0.1:" + strconv.Itoa(port)}
	p.argv = []string{bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"}
	p.argv = append(p.argv, args...)
	p.ready = func() error { return redisPing(p.addr) }
	p.start()
	t.Cleanup(p.Kill)
	return p
}

// redisPing speaks just enough RESP to check that Redis serves.
func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis answered %q", line)
	}
	return nil
}

// ZooKeeperJar is where Debian's zookeeper package puts the server.
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// StartZooKeeper starts a private standalone ZooKeeper on a free port with its
// own data directory. It is killed when t ends.
func StartZooKeeper(t testing.TB) *Process {
	t.Helper()
	java := require(t, "java")
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		testenv.Missing(t, "ZooKeeper server jar", err)
	}
	port := FreePort(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "zoo.cfg")
	conf := fmt.Sprintf("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\n"+
		"clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n"+
		"minSessionTimeout=1000\nmaxSessionTimeout=10000\n4lw.commands.whitelist=srvr,ruok\n", filepath.Join(dir, "data"), port)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cp := ZooKeeperJar
	if _, err := os.Stat("/etc/zookeeper/conf"); err == nil {
		cp = "/etc/zookeeper/conf:" + cp
	}
	p := &Process{t: t, name: "zookeeper-" + strconv.Itoa(port), addr: "127.0.0.1:" + strconv.Itoa(port)}
	p.argv = []string{java, "-Xmx256m", "-cp", cp, "-Dzookeeper.log.dir=" + dir,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg}
	p.ready = func() error { return zkServing(p.addr) }
	p.start()
	t.Cleanup(p.Kill)
	return p
}

// zkServing waits for "Mode: standalone": ZooKeeper answers four-letter
// words before it serves requests.
func zkServing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if !strings.Contains(b.String(), "Mode: standalone") {
		return errors.New("zookeeper is not serving yet")
	}
	return nil
}

// Eventually calls f until it returns nil or ctx is done.
func Eventually(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
