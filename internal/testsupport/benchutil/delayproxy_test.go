package benchutil

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every read with the same bytes.
func echoServer(t *testing.T) string {
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
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// dialThrough connects to an echo server through a proxy adding rtt.
func dialThrough(t *testing.T, rtt time.Duration) net.Conn {
	t.Helper()
	p, err := StartDelayProxy(echoServer(t), rtt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The proxy passes bytes unchanged, in order, both ways, and an exchange
// through it takes at least the round trip it adds.
func TestDelayProxyDelaysAndKeepsBytes(t *testing.T) {
	const rtt = 20 * time.Millisecond
	c := dialThrough(t, rtt)
	for i := range 5 {
		msg := bytes.Repeat([]byte{byte('a' + i)}, 1000*(i+1))
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < rtt {
			t.Errorf("exchange %d took %v through a proxy adding %v", i, took, rtt)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("exchange %d: the bytes changed on the way", i)
		}
	}
}

// Data in flight is delayed once, not once per chunk ahead of it: ten
// writes sent together arrive about one round trip later, not ten.
func TestDelayProxyPipelines(t *testing.T) {
	const rtt = 100 * time.Millisecond
	c := dialThrough(t, rtt)
	start := time.Now()
	for range 10 {
		if _, err := c.Write([]byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	got := make([]byte, 100)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	// Serialised delays would take at least 10 round trips.
	if took := time.Since(start); took >= 10*rtt {
		t.Errorf("ten pipelined writes took %v, as if each waited for the one before (round trip %v)", took, rtt)
	}
}

// Close ends connections in use.
func TestDelayProxyCloseCutsConnections(t *testing.T) {
	p, err := StartDelayProxy(echoServer(t), time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x"))
	io.ReadFull(c, make([]byte, 1))
	p.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a connection read after Close succeeded")
	}
}
