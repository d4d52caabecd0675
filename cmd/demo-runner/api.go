package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/spec"
)

// A Badger store belongs to one process. So that status, list, audit,
// signal and cancel still work while a run, worker or serve process holds
// it, those long-running commands serve the HTTP API on a unix socket in the
// data directory, and the short commands go through it when they find the
// store held.

func socketPath(dataDir string) string { return filepath.Join(dataDir, "api.sock") }

// serveSocket serves the API on the data directory's socket until ctx ends.
// A socket another live process answers on is left alone.
func (a *app) serveSocket(ctx context.Context) {
	path := socketPath(a.g.dataDir)
	lis, err := net.Listen("unix", path)
	if err != nil {
		if c, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
			c.Close()
			a.log.Debug("another process serves the local API", "socket", path)
			return
		}
		os.Remove(path) // stale: its process is gone
		if lis, err = net.Listen("unix", path); err != nil {
			a.log.Warn("cannot serve the local API", "socket", path, "error", err)
			return
		}
	}
	a.closers = append(a.closers, func() error { os.Remove(path); return nil })
	go a.serveOn(ctx, lis)
}

// forwardable are the commands that may go through another process's socket.
var forwardable = map[string]bool{"status": true, "list": true, "audit": true, "signal": true, "cancel": true}

// heldElsewhere reports whether opening the store failed because another
// process holds it.
func heldElsewhere(err error) bool { return errors.Is(err, badger.ErrDirectoryInUse) }

// forward runs a short command through the API of the process holding the store.
func forward(ctx context.Context, g globals, name string, args []string, list listOptions, stdout io.Writer) error {
	sock := socketPath(g.dataDir)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: 30 * time.Second}
	method, path := http.MethodGet, ""
	switch name {
	case "list":
		q := url.Values{}
		for k, v := range map[string]string{"status": list.statuses, "workflow": list.workflow, "cursor": list.cursor, "limit": fmt.Sprint(list.limit)} {
			if v != "" {
				q.Set(k, v)
			}
		}
		for k, v := range list.labels {
			q.Add("label", k+"="+v)
		}
		path = "/runs?" + q.Encode()
	default:
		id, err := runIDArg(args)
		if err != nil {
			return err
		}
		path = "/runs/" + url.PathEscape(id)
		switch name {
		case "audit":
			path += "/audit"
		case "signal", "cancel":
			method, path = http.MethodPost, path+"/"+name
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://runstate"+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return exitError{Code: exitFailure, Msg: fmt.Sprintf("the store is held by another demo-runner process, and its API at %s does not answer: %v", sock, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return exitError{Code: exitFailure, Msg: err.Error()}
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.Unmarshal(body, &e)
		return storeError(&spec.Error{Code: spec.Code(e.Error.Code), Message: e.Error.Message})
	}
	if name == "signal" || name == "cancel" {
		var run spec.RunSnapshot
		if err := json.Unmarshal(body, &run); err != nil {
			return exitError{Code: exitFailure, Msg: err.Error()}
		}
		fmt.Fprintf(stdout, "%s %s\n", run.RunID, run.Status)
		return nil
	}
	var out bytes.Buffer
	if err := json.Indent(&out, body, "", "  "); err != nil {
		return exitError{Code: exitFailure, Msg: err.Error()}
	}
	_, err = stdout.Write(out.Bytes())
	return err
}
