package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo serves lines back, on a free port.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T) *Proxy {
	t.Helper()
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// ask sends a line and reads the answer, waiting at most wait.
func ask(c net.Conn, wait time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestPartitionHoldsTrafficUntilHealed(t *testing.T) {
	p := start(t)
	c := dial(t, p)
	if got, err := ask(c, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("through the proxy: %q %v", got, err)
	}
	p.Partition()
	if got, err := ask(c, 300*time.Millisecond); err == nil {
		t.Fatalf("an answer across a partition: %q", got)
	}
	fresh := dial(t, p) // accepted, but reaches nothing
	if got, err := ask(fresh, 300*time.Millisecond); err == nil {
		t.Fatalf("a new connection answered across a partition: %q", got)
	}
	p.Heal()
	// What waited is delivered: the new connection's line, then a new one.
	fresh.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(fresh)
	if got, err := r.ReadString('\n'); err != nil || got != "ping\n" {
		t.Fatalf("the held line after Heal: %q %v", got, err)
	}
}

func TestResetCutsOpenConnectionsOnly(t *testing.T) {
	p := start(t)
	c := dial(t, p)
	if _, err := ask(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if got, err := ask(c, 5*time.Second); err == nil {
		t.Fatalf("a cut connection answered: %q", got)
	}
	if got, err := ask(dial(t, p), 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("a connection after the reset: %q %v", got, err)
	}
}

func TestDelayIsAddedToEachExchange(t *testing.T) {
	p := start(t)
	c := dial(t, p)
	p.SetDelay(100 * time.Millisecond)
	began := time.Now()
	if _, err := ask(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 100*time.Millisecond {
		t.Fatalf("an exchange took %v with 100ms added", took)
	}
}
