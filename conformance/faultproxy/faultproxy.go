// Package faultproxy is a TCP proxy, in the test's own process, that a
// store's harness puts between the store and its server to disturb the
// path: a partition (traffic stops, connections hang), a reset (every
// connection is cut), or a delay. It changes nothing on the machine's
// network, so tests that use it run anywhere and in parallel.
//
//	p, err := faultproxy.Start("127.0.0.1:3306")
//	// open the store on p.Addr() instead of the server's address
//	p.Partition()  // calls now hang until their deadline
//	p.Heal()
//	p.Reset()      // connections are cut; new ones work
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections to a target, and can be told to stop
// forwarding, cut connections, or delay them.
type Proxy struct {
	target string
	ln     net.Listener

	mu          sync.Mutex
	changed     *sync.Cond // broadcast when partitioned, delay or closing change
	partitioned bool
	oneWay      time.Duration
	closing     bool
	conns       map[net.Conn]struct{}
	wg          sync.WaitGroup
}

// Start listens on a free loopback port and forwards what it accepts to
// target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.changed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the host:port to connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition stops all traffic: data already sent waits in the proxy, new
// connections are accepted but reach nothing, and every connection hangs,
// as behind a network partition, until Heal.
func (p *Proxy) Partition() { p.set(func() { p.partitioned = true }) }

// Heal ends a partition: what waited is delivered, in order.
func (p *Proxy) Heal() { p.set(func() { p.partitioned = false }) }

// SetDelay makes the proxy add roundTrip to every exchange (half in each
// direction), from the next data on; 0 removes it.
func (p *Proxy) SetDelay(roundTrip time.Duration) { p.set(func() { p.oneWay = max(roundTrip, 0) / 2 }) }

// Reset cuts every connection open now, with a TCP reset where the system
// allows: both ends see their connection fail. Later connections work.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
		delete(p.conns, c)
	}
	p.changed.Broadcast()
}

// Connections is how many connections (both ends counted) are open.
func (p *Proxy) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, cuts every connection and waits for the
// forwarding goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closing = true
	for c := range p.conns {
		c.Close()
	}
	p.changed.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) set(change func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change()
	p.changed.Broadcast()
}

// track records an open connection; false when the proxy is closing.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve dials the target for client once no partition stands in the way,
// and forwards both ways.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.pass(client) {
		p.forget(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil || !p.track(server) {
		p.forget(client)
		return
	}
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pipe(server, client) }()
	go func() { defer both.Done(); p.pipe(client, server) }()
	both.Wait()
}

// pass waits while a partition stands; false when c was cut or the proxy
// closes meanwhile.
func (p *Proxy) pass(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.partitioned && !p.closing {
		if _, open := p.conns[c]; !open {
			return false
		}
		p.changed.Wait()
	}
	_, open := p.conns[c]
	return open && !p.closing
}

// pipe copies from src to dst, holding each chunk through partitions and
// for the delay, and closes both ends when either fails.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.forget(dst)
	defer p.forget(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay := p.oneWay
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			if !p.pass(src) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}
