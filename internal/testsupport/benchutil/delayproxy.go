package benchutil

import (
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DelayProxy is a TCP proxy that adds latency: every byte it forwards, in
// either direction, is delivered half the round trip after it arrived, as
// if client and server were apart by a network. It delays, never
// throttles: data keeps flowing while earlier data waits, so pipelined
// traffic is not serialised. It lives in the benchmark's process and
// changes nothing on the machine's network.
//
// Its delivering goroutines sleep in nanosleep, and a goroutine in a
// system call keeps one of the runtime's processors (GOMAXPROCS) until the
// runtime's monitor takes it back, which can take milliseconds. With dozens
// of connections the sleepers would hold every processor and the
// benchmark's own goroutines would wait for one: measured at 2 ms and 32
// writers, runs fell to a quarter of their throughput at random. So the
// proxy adds a processor for each direction of each connection while it
// runs, and gives them back on Close.
type DelayProxy struct {
	target    string
	oneWay    atomic.Int64 // nanoseconds
	ln        net.Listener
	wg        sync.WaitGroup
	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	closing   bool
	baseProcs int
}

// StartDelayProxy listens on a free loopback port and forwards each
// connection to target with roundTrip added to every exchange.
func StartDelayProxy(target string, roundTrip time.Duration) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, baseProcs: runtime.GOMAXPROCS(0)}
	p.SetDelay(roundTrip)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// SetDelay changes the round trip the proxy adds, from the next data it
// reads on.
func (p *DelayProxy) SetDelay(roundTrip time.Duration) { p.oneWay.Store(int64(max(roundTrip, 0) / 2)) }

// Delay is the round trip the proxy adds.
func (p *DelayProxy) Delay() time.Duration { return 2 * time.Duration(p.oneWay.Load()) }

// Calibrate sets the added delay so that ping, a round trip through the
// proxy, takes target more than direct, a round trip without it: the
// proxy's own handoffs and the kernel's timer slack take part of the delay
// rather than add to it. It returns the median round trip reached.
func (p *DelayProxy) Calibrate(target time.Duration, ping, direct func() time.Duration) time.Duration {
	floor := median(direct)
	p.SetDelay(target)
	var got time.Duration
	for range 6 {
		got = median(ping)
		miss := got - floor - target
		if miss.Abs() < target/20 {
			break
		}
		p.SetDelay(p.Delay() - miss)
	}
	return got
}

// median is the median of 21 calls of f.
func median(f func() time.Duration) time.Duration {
	lat := make([]time.Duration, 21)
	for i := range lat {
		lat[i] = f()
	}
	slices.Sort(lat)
	return lat[len(lat)/2]
}

// Addr is the host:port to connect to instead of the target.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening, cuts every connection and waits for the
// forwarding goroutines to end.
func (p *DelayProxy) Close() error {
	p.mu.Lock()
	p.closing = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	runtime.GOMAXPROCS(p.baseProcs)
	return err
}

func (p *DelayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	// One sleeper per direction, so one processor per tracked end.
	if want := p.baseProcs + len(p.conns); runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
	return true
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			client.Close()
			server.Close()
			continue
		}
		for _, c := range []net.Conn{client, server} {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
		}
		p.wg.Add(2)
		go p.forward(client, server)
		go p.forward(server, client)
	}
}

// chunk is data read at a moment, due at that moment plus the one-way
// delay.
type chunk struct {
	data []byte
	due  time.Time
}

// forward copies from src to dst, delivering each read oneWay after it
// arrived. A reader stamps the chunks; a writer waits for each one's due
// time, so the delay does not add up across chunks in flight.
func (p *DelayProxy) forward(src, dst net.Conn) {
	defer p.wg.Done()
	queue := make(chan chunk, 1024)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{buf[:n], time.Now().Add(time.Duration(p.oneWay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		if wait := time.Until(c.due); wait > 0 {
			sleepPrecisely(wait)
		}
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	// One side ended: end both, so the peer sees the close as it would
	// across a network.
	src.Close()
	dst.Close()
	for range queue { // let the reader finish
	}
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}
