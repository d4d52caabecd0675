package workflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/tracker"
)

// SupervisorArg is the argument that makes a program run as a step
// supervisor. A program that sets Options.Supervisor to itself hands
// control to Supervise first thing in main:
//
//	if len(os.Args) > 1 && os.Args[1] == workflow.SupervisorArg {
//		os.Exit(workflow.Supervise(os.Args[2:]))
//	}
const SupervisorArg = "__runstate-step-supervisor"

// The worker and the supervisor share two pipes. On the supervisor's fd 3
// the worker writes deadlines, each 8 bytes: the time on the machine's boot
// clock until which the run's lease is known to be the worker's. On fd 4
// the supervisor reports, in one byte before it ends, why it ended the
// command itself; the command's own exit status says nothing about that,
// since any command may exit with any code.
const (
	deadlineFD = 3
	statusFD   = 4
)

// What a supervisor reports on its status pipe.
const (
	statusRefused = 'R' // the deadline had passed before the command could start
	statusLapsed  = 'L' // the deadline passed while the command ran: it was ended
)

const exitSupervisorBroken = 126

// Supervise runs one host command (args: the program and its arguments) as
// a supervisor in the command's process group, and returns the exit code.
// It ends the whole group when the deadline the worker last sent passes
// (the worker could not renew the lease, or is stalled: another worker may
// take the run over) and when the pipe closes without the command having
// finished (the worker died). It refuses to start a command whose first
// deadline has already passed. The group dies, not just the shell, so no
// step command outlives the worker's right to run it.
func Supervise(args []string) int {
	// The worker reads the command's output through a pipe; once the worker
	// is gone a write to it must fail, not end the supervisor (SIGPIPE)
	// before it has ended the command.
	signal.Ignore(syscall.SIGPIPE)
	// The pipes are the supervisor's, not the command's.
	syscall.CloseOnExec(deadlineFD)
	syscall.CloseOnExec(statusFD)
	pipe := os.NewFile(deadlineFD, "runstate-deadlines")
	status := os.NewFile(statusFD, "runstate-status")
	first, err := readDeadline(pipe)
	if err != nil || len(args) == 0 {
		fmt.Fprintf(os.Stderr, "runstate supervisor: no deadline from the worker (%v); not starting the command\n", err)
		return exitSupervisorBroken
	}
	if bootClock() >= first {
		status.Write([]byte{statusRefused})
		fmt.Fprintln(os.Stderr, "runstate supervisor: the run's lease could not be confirmed in time; not starting the command")
		return exitSupervisorBroken
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "runstate supervisor: %v\n", err)
		return exitSupervisorBroken
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadlines := make(chan int64)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for {
			d, err := readDeadline(pipe)
			if err != nil {
				return
			}
			deadlines <- d
		}
	}()
	timer := time.NewTimer(time.Duration(first - bootClock()))
	for {
		select {
		case err := <-exited:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &ee) && ee.ExitCode() >= 0:
				return ee.ExitCode()
			}
			return exitSupervisorBroken
		case d := <-deadlines:
			timer.Reset(time.Duration(d - bootClock()))
		case <-timer.C:
			status.Write([]byte{statusLapsed})
			killGroup("the run's lease was not renewed in time (the worker stalled or lost the store)")
		case <-closed:
			killGroup("the worker is gone")
		}
	}
}

// killGroup ends the supervisor's process group: the command, everything
// it started, and the supervisor.
func killGroup(why string) {
	fmt.Fprintf(os.Stderr, "runstate supervisor: %s; ending the step's commands\n", why)
	syscall.Kill(-syscall.Getpgrp(), syscall.SIGKILL)
	select {} // the signal ends this process too
}

func readDeadline(r io.Reader) (int64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return int64(binary.BigEndian.Uint64(b[:])), nil
}

// superviseCommand starts cmd (the supervisor, as Options.Supervisor
// builds it) and feeds it the lease's deadlines, each margin before the
// lease can end at the earliest, until it exits.
func superviseCommand(cmd *exec.Cmd, run *tracker.Run, margin time.Duration) error {
	deadlineR, deadlineW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer deadlineW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		deadlineR.Close()
		return err
	}
	defer statusR.Close()
	cmd.ExtraFiles = []*os.File{deadlineR, statusW}
	send := func(until time.Time) error {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(bootClock()+int64(time.Until(until)-margin)))
		_, err := deadlineW.Write(b[:])
		return err
	}
	until, changed, leased := run.LeaseValidUntil()
	if !leased {
		until, margin = time.Now().Add(100*365*24*time.Hour), 0 // no lease: no end
	}
	err = send(until)
	if err == nil {
		err = cmd.Start()
	}
	deadlineR.Close()
	statusW.Close()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	if leased {
		go func() {
			for {
				select {
				case <-done:
					return
				case <-changed:
				}
				until, changed, _ = run.LeaseValidUntil()
				if send(until) != nil {
					return
				}
			}
		}()
	}
	err = cmd.Wait()
	close(done)
	var why [1]byte
	if n, _ := statusR.Read(why[:]); n == 1 {
		switch why[0] {
		case statusRefused:
			return errLeaseWindowClosed
		case statusLapsed:
			return ErrLeaseLapsed
		}
	}
	return err
}

// errLeaseWindowClosed: the lease was not known to be this worker's any
// more when the supervisor would have started the command (the worker
// stalled, or its lease check took longer than the lease), so it did not.
var errLeaseWindowClosed = errors.New("the lease could not be confirmed until the command started")

// ErrLeaseLapsed: a command was ended because the run's lease was not
// renewed in time. It matches runstate.ErrLeaseLost: the worker can no longer
// show the run is its own, and must not write as if it were.
var ErrLeaseLapsed = fmt.Errorf("%w: the lease was not renewed in time, so the step's command was ended", runstate.ErrLeaseLost)
