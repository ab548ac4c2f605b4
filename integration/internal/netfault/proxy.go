// Package netfault puts an in-process toxiproxy between a test and a server,
// to add network faults to the traffic. It lives in the integration module so
// that the root module does not require toxiproxy (nor, through it,
// prometheus, zerolog and gorilla/mux).
package netfault

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is an in-process toxiproxy between a client and a server: point the
// client at Addr and add faults to the traffic.
type Proxy struct {
	t testing.TB
	p *toxiproxy.Proxy
}

// NewProxy starts a proxy to upstream on a free loopback port. It stops when
// t ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "proxy-"+upstream, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{t: t, p: p}
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.p.Listen }

func (p *Proxy) add(kind, stream, attrs string) {
	p.t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":{%s}}`, kind+"_"+stream, kind, stream, attrs)
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		p.t.Fatalf("add toxic %s: %v", js, err)
	}
}

// Latency delays the server's answers by d.
func (p *Proxy) Latency(d time.Duration) {
	p.add("latency", "downstream", fmt.Sprintf(`"latency":%d`, d.Milliseconds()))
}

// Blackhole stops all traffic to the server without closing connections,
// as a network partition does: requests reach the server (or not) and no
// answer comes back.
func (p *Proxy) Blackhole() {
	p.add("timeout", "downstream", `"timeout":0`)
}

// ResetPeer resets every connection after d, as a crashed middlebox does.
func (p *Proxy) ResetPeer(d time.Duration) {
	p.add("reset_peer", "upstream", fmt.Sprintf(`"timeout":%d`, d.Milliseconds()))
}

// CutAfterBytes lets n bytes of the server's answers through, then closes the
// connection: a cut in the middle of a reply.
func (p *Proxy) CutAfterBytes(n int) {
	p.add("limit_data", "downstream", fmt.Sprintf(`"bytes":%d`, n))
}

// Clear removes every fault.
func (p *Proxy) Clear() {
	p.p.Toxics.ResetToxics(context.Background())
}

// Reconnect closes every open connection through the proxy; new ones work.
func (p *Proxy) Reconnect() {
	p.p.Stop()
	if err := p.p.Start(); err != nil {
		p.t.Fatalf("restart proxy: %v", err)
	}
}
