package faulttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/internal/testenv"
)

// The replicated deployments of the failover drills: a Redis primary with
// replicas behind Sentinel, a Redis Cluster with a replica per master, and
// a ZooKeeper ensemble. Every process is private to the test (free loopback
// ports, data in its temp dirs) and is killed when it ends.

// Sentinel is a Redis primary, its replicas and the sentinels that
// monitor them under [SentinelMaster].
type Sentinel struct {
	Nodes     []*Process // the data nodes; Nodes[0] was the first primary
	Sentinels []*Process
}

// StartReplica starts a Redis replica of primary (StartRedis's, with args
// after its own) and returns once its link to primary is up.
func StartReplica(t testing.TB, primary *Process, args ...string) *Process {
	t.Helper()
	host, port, _ := net.SplitHostPort(primary.Addr())
	r := StartRedis(t, append([]string{"--replicaof", host, port}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Eventually(ctx, func() error {
		return admin(ctx, r.Addr(), func(c *redis.Client) error {
			info, err := c.Info(ctx, "replication").Result()
			if err == nil && !strings.Contains(info, "master_link_status:up") {
				err = errors.New("link to the primary not up")
			}
			return err
		})
	})
	if err != nil {
		t.Fatalf("replica of %s: %v", primary.Addr(), err)
	}
	return r
}

// SentinelMaster is the name the sentinels monitor the primary under.
const SentinelMaster = "drill"

// StartSentinel starts a primary, replicas replicas of it and sentinels
// sentinels (quorum a majority of them) that mark a node down after 1s and
// fail it over. args go to every data node (StartRedis's, after its own).
// It returns once the deployment is [Sentinel.Settled].
func StartSentinel(t testing.TB, replicas, sentinels int, args ...string) *Sentinel {
	t.Helper()
	bin := require(t, "redis-sentinel")
	s := &Sentinel{}
	primary := StartRedis(t, args...)
	s.Nodes = append(s.Nodes, primary)
	host, primaryPort, _ := net.SplitHostPort(primary.Addr())
	for range replicas {
		s.Nodes = append(s.Nodes, StartReplica(t, primary, args...))
	}
	for range sentinels {
		port := FreePort(t)
		dir := t.TempDir()
		cfg := filepath.Join(dir, "sentinel.conf") // the sentinel rewrites it
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\n"+
			"sentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 2000\n"+
			"sentinel parallel-syncs %s %d\n",
			port, dir, SentinelMaster, host, primaryPort, sentinels/2+1,
			SentinelMaster, SentinelMaster, SentinelMaster, max(replicas, 1))
		if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		p := &Process{t: t, name: "sentinel-" + strconv.Itoa(port), addr: "127.0.0.1:" + strconv.Itoa(port),
			argv: []string{bin, cfg}}
		p.ready = func() error { return redisPing(p.addr) }
		p.start()
		t.Cleanup(p.Kill)
		s.Sentinels = append(s.Sentinels, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Eventually(ctx, func() error { return s.Settled(ctx) }); err != nil {
		t.Fatalf("sentinel deployment never settled: %v", err)
	}
	return s
}

// SentinelAddrs are the sentinels' addresses, for a failover client.
func (s *Sentinel) SentinelAddrs() []string {
	var a []string
	for _, p := range s.Sentinels {
		a = append(a, p.Addr())
	}
	return a
}

// admin runs fn with a short-lived plain client on addr.
func admin(ctx context.Context, addr string, fn func(c *redis.Client) error) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, ContextTimeoutEnabled: true})
	defer c.Close()
	return fn(c)
}

// Primary asks the first sentinel that answers for the primary's address.
func (s *Sentinel) Primary(ctx context.Context) (*Process, error) {
	var errs []error
	for _, sp := range s.Sentinels {
		var addr []string
		err := admin(ctx, sp.Addr(), func(c *redis.Client) error {
			var err error
			addr, err = c.Do(ctx, "sentinel", "get-master-addr-by-name", SentinelMaster).StringSlice()
			return err
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return s.node(net.JoinHostPort(addr[0], addr[1]))
	}
	return nil, errors.Join(errs...)
}

func (s *Sentinel) node(addr string) (*Process, error) {
	for _, p := range s.Nodes {
		if p.Addr() == addr {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no node at %s", addr)
}

// Rejoin makes p, a data node that is not the primary, a replica of the
// primary the sentinels name, starting it first if it was killed: as the
// sentinels would themselves, some seconds later (they reconfigure a
// returning or demoted old primary only once it has been seen for a while).
func (s *Sentinel) Rejoin(ctx context.Context, p *Process) error {
	primary, err := s.Primary(ctx)
	if err != nil {
		return err
	}
	if primary == p {
		return fmt.Errorf("%s is still the primary", p.Addr())
	}
	p.mu.Lock()
	killed := p.cmd == nil
	p.mu.Unlock()
	if killed {
		p.Start()
	}
	host, port, _ := net.SplitHostPort(primary.Addr())
	return admin(ctx, p.Addr(), func(c *redis.Client) error {
		return c.Do(ctx, "replicaof", host, port).Err()
	})
}

// Failover asks a sentinel for a graceful switch (SENTINEL FAILOVER).
func (s *Sentinel) Failover(ctx context.Context) error {
	return admin(ctx, s.Sentinels[0].Addr(), func(c *redis.Client) error {
		return c.Do(ctx, "sentinel", "failover", SentinelMaster).Err()
	})
}

// Settled reports nil when every sentinel names one primary, that primary
// has every other node as an online replica with its link up, and every
// sentinel knows every replica (none down) and every other sentinel.
func (s *Sentinel) Settled(ctx context.Context) error {
	var primary string
	for _, sp := range s.Sentinels {
		err := admin(ctx, sp.Addr(), func(c *redis.Client) error {
			addr, err := c.Do(ctx, "sentinel", "get-master-addr-by-name", SentinelMaster).StringSlice()
			if err != nil {
				return err
			}
			a := net.JoinHostPort(addr[0], addr[1])
			if primary != "" && a != primary {
				return fmt.Errorf("sentinels disagree on the primary: %s, %s", primary, a)
			}
			primary = a
			reps, err := c.Do(ctx, "sentinel", "replicas", SentinelMaster).Slice()
			if err != nil {
				return err
			}
			up := 0
			for _, r := range reps {
				if f := fields(r); !strings.Contains(f["flags"], "down") && f["master-link-status"] == "ok" &&
					net.JoinHostPort(f["master-host"], f["master-port"]) == a {
					up++
				}
			}
			if up != len(s.Nodes)-1 {
				return fmt.Errorf("sentinel %s sees %d of %d replicas up", sp.Addr(), up, len(s.Nodes)-1)
			}
			sens, err := c.Do(ctx, "sentinel", "sentinels", SentinelMaster).Slice()
			if err != nil {
				return err
			}
			if len(sens) != len(s.Sentinels)-1 {
				return fmt.Errorf("sentinel %s knows %d of %d other sentinels", sp.Addr(), len(sens), len(s.Sentinels)-1)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return admin(ctx, primary, func(c *redis.Client) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master") {
			return fmt.Errorf("%s is not a master yet", primary)
		}
		if n := strings.Count(info, ",state=online,"); n != len(s.Nodes)-1 {
			return fmt.Errorf("primary %s has %d of %d replicas online", primary, n, len(s.Nodes)-1)
		}
		return nil
	})
}

// fields turns a RESP2 flat list of names and values (SENTINEL REPLICAS's
// entries) into a map.
func fields(v any) map[string]string {
	m := map[string]string{}
	switch l := v.(type) {
	case []any:
		for i := 0; i+1 < len(l); i += 2 {
			m[fmt.Sprint(l[i])] = fmt.Sprint(l[i+1])
		}
	case map[any]any:
		for k, v := range l {
			m[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	}
	return m
}

// Cluster is a Redis Cluster of masters, each with its replicas.
type Cluster struct {
	Nodes []*Process
}

// StartCluster starts masters*(1+replicas) nodes with a 1s node timeout,
// joins them with redis-cli --cluster create and returns once the cluster
// is [Cluster.Settled]. args go to every node (StartRedis's, after its
// own).
func StartCluster(t testing.TB, masters, replicas int, args ...string) *Cluster {
	t.Helper()
	cli := require(t, "redis-cli")
	c := &Cluster{}
	argv := []string{"--cluster", "create"}
	for range masters * (1 + replicas) {
		p := StartRedis(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000"}, args...)...)
		c.Nodes = append(c.Nodes, p)
		argv = append(argv, p.Addr())
	}
	argv = append(argv, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, argv...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	if err := Eventually(ctx, func() error { return c.Settled(ctx) }); err != nil {
		t.Fatalf("cluster never settled: %v", err)
	}
	return c
}

// Addrs are the nodes' addresses, for a Cluster client.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, p := range c.Nodes {
		a = append(a, p.Addr())
	}
	return a
}

// ClusterNode is a line of CLUSTER NODES.
type ClusterNode struct {
	ID, Addr string
	Master   bool
	MasterID string // of a replica
	Slots    []string
	Flags    string
}

// ClusterNodes returns CLUSTER NODES as seen by the first node that
// answers.
func (c *Cluster) ClusterNodes(ctx context.Context) ([]ClusterNode, error) {
	var errs []error
	for _, p := range c.Nodes {
		nodes, err := c.nodesAt(ctx, p.Addr())
		if err == nil {
			return nodes, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// nodesAt returns CLUSTER NODES as seen by the node at addr.
func (c *Cluster) nodesAt(ctx context.Context, addr string) ([]ClusterNode, error) {
	var out string
	err := admin(ctx, addr, func(cl *redis.Client) error {
		var err error
		out, err = cl.ClusterNodes(ctx).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	var nodes []ClusterNode
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := ClusterNode{ID: f[0], Addr: strings.SplitN(f[1], "@", 2)[0], Flags: f[2],
			Master: strings.Contains(f[2], "master"), Slots: f[8:]}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// Owner returns the master serving slot, as the first node that answers
// sees it.
func (c *Cluster) Owner(ctx context.Context, slot int) (ClusterNode, error) {
	nodes, err := c.ClusterNodes(ctx)
	if err != nil {
		return ClusterNode{}, err
	}
	for _, n := range nodes {
		if !n.Master || strings.Contains(n.Flags, "fail") {
			continue
		}
		for _, r := range n.Slots {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, _ := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if hi != "" {
				b, _ = strconv.Atoi(hi)
			}
			if a <= slot && slot <= b {
				return n, nil
			}
		}
	}
	return ClusterNode{}, fmt.Errorf("no master serves slot %d", slot)
}

// Process returns the node at addr.
func (c *Cluster) Process(addr string) *Process {
	for _, p := range c.Nodes {
		if p.Addr() == addr {
			return p
		}
	}
	return nil
}

// Settled reports nil when every node answers and says cluster_state:ok,
// every replica's link to its master is up, and every node sees the same
// number of masters, none failing or in handshake, each with as many
// replicas as the others, every node accounted for.
func (c *Cluster) Settled(ctx context.Context) error {
	var masters int
	for _, p := range c.Nodes {
		err := admin(ctx, p.Addr(), func(cl *redis.Client) error {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster state not ok", p.Addr())
			}
			repl, err := cl.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("%s: replica link down", p.Addr())
			}
			return nil
		})
		if err != nil {
			return err
		}
		nodes, err := c.nodesAt(ctx, p.Addr())
		if err != nil {
			return err
		}
		n, per := 0, map[string]int{}
		for _, x := range nodes {
			if strings.Contains(x.Flags, "fail") || strings.Contains(x.Flags, "handshake") {
				return fmt.Errorf("%s sees %s as %s", p.Addr(), x.Addr, x.Flags)
			}
			if x.Master {
				n++
				per[x.ID] += 0
			} else {
				per[x.MasterID]++
			}
		}
		counts := slices.Collect(maps.Values(per))
		if len(counts) == 0 {
			return fmt.Errorf("%s lists no master", p.Addr())
		}
		if masters == 0 {
			masters = n
		}
		if n != masters || n*(1+slices.Min(counts)) != len(c.Nodes) || slices.Min(counts) != slices.Max(counts) {
			return fmt.Errorf("%s: %d masters, replicas per master %v", p.Addr(), n, counts)
		}
	}
	return nil
}

// Ensemble is a ZooKeeper ensemble.
type Ensemble struct {
	Servers []*Process
}

// StartEnsemble starts n ZooKeeper servers forming one ensemble (tickTime
// 500ms, sessions of 1..10s) and returns once one leads and the rest
// follow.
func StartEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	java := require(t, "java")
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		testenv.Missing(t, "ZooKeeper server jar", err)
	}
	cp := ZooKeeperJar
	if _, err := os.Stat("/etc/zookeeper/conf"); err == nil {
		cp = "/etc/zookeeper/conf:" + cp
	}
	e := &Ensemble{}
	ports := make([]int, n)
	var peers strings.Builder
	for i := range n {
		ports[i] = FreePort(t)
		fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", i+1, FreePort(t), FreePort(t))
	}
	for i := range n {
		dir := t.TempDir()
		data := filepath.Join(dir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(dir, "zoo.cfg")
		conf := fmt.Sprintf("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\n"+
			"clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n"+
			"minSessionTimeout=1000\nmaxSessionTimeout=10000\n4lw.commands.whitelist=srvr,ruok\n%s",
			data, ports[i], peers.String())
		if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		p := &Process{t: t, name: "zookeeper-" + strconv.Itoa(ports[i]), addr: "127.0.0.1:" + strconv.Itoa(ports[i])}
		p.argv = []string{java, "-Xmx256m", "-cp", cp, "-Dzookeeper.log.dir=" + dir,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg}
		// A server answers ruok before it has a quorum; Settled waits for one.
		p.ready = func() error { return zkRuok(p.addr) }
		p.start()
		t.Cleanup(p.Kill)
		e.Servers = append(e.Servers, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Eventually(ctx, func() error { return e.Settled(ctx) }); err != nil {
		t.Fatalf("ensemble never settled: %v", err)
	}
	return e
}

// Addrs are the servers' addresses, for zk.Connect.
func (e *Ensemble) Addrs() []string {
	var a []string
	for _, p := range e.Servers {
		a = append(a, p.Addr())
	}
	return a
}

// Mode returns what srvr says of the server at addr: "leader",
// "follower", or an error when it does not serve.
func Mode(addr string) (string, error) {
	out, err := zk4(addr, "srvr")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("%s does not serve: %q", addr, strings.TrimSpace(out))
}

// Leader returns the server that leads.
func (e *Ensemble) Leader() (*Process, error) {
	for _, p := range e.Servers {
		if m, err := Mode(p.Addr()); err == nil && m == "leader" {
			return p, nil
		}
	}
	return nil, errors.New("no leader")
}

// Settled reports nil when one server leads and every other follows.
func (e *Ensemble) Settled(context.Context) error {
	leaders := 0
	for _, p := range e.Servers {
		m, err := Mode(p.Addr())
		if err != nil {
			return err
		}
		switch m {
		case "leader":
			leaders++
		case "follower":
		default:
			return fmt.Errorf("%s: mode %s", p.Addr(), m)
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%d leaders", leaders)
	}
	return nil
}

func zkRuok(addr string) error {
	out, err := zk4(addr, "ruok")
	if err != nil {
		return err
	}
	if out != "imok" {
		return fmt.Errorf("ruok: %q", out)
	}
	return nil
}

// zk4 sends a four-letter word and reads the answer to the end.
func zk4(addr, word string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(word)); err != nil {
		return "", err
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
	return b.String(), nil
}
