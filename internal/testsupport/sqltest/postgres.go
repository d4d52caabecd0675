package sqltest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/runstate/runstate/adapters/postgres/scratch"
	"github.com/runstate/runstate/internal/testsupport/serverproc"
)

// PostgresEnvDSN names the variable that points tests at a Postgres server.
const PostgresEnvDSN = "RUNSTATE_POSTGRES_DSN"

// Postgres is the PostgreSQL test environment: scratch schemas in the
// database at RUNSTATE_POSTGRES_DSN, e.g.
// postgres://runstate:secret@db.local:5432/test?sslmode=disable, else in
// Debian's PostgreSQL with trust authentication on 127.0.0.1:5432
// (database test), else PostgreSQL 16 in Docker; private servers are
// initdb's and postgres's (run as the user postgres when the test runs as
// root: PostgreSQL refuses to run as root).
var Postgres = Engine[*scratch.Server]{
	Name:     "PostgreSQL",
	EnvDSN:   PostgresEnvDSN,
	LocalDSN: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	Hint:     "start PostgreSQL on 127.0.0.1:5432 with a database test",
	FromDSN:  scratch.FromDSN,
	Docker: Container{Repository: "postgres", Tag: "16", Env: []string{"POSTGRES_PASSWORD=runstate", "POSTGRES_DB=test"}, Port: "5432/tcp",
		DSN: "postgres://postgres:runstate@%s/test?sslmode=disable"},
	Package:      "postgresql",
	startPrivate: startPostgres,
	shared:       &shared[*scratch.Server]{},
}

// startPostgres initialises a cluster in dir with initdb and starts
// postgres on it: user postgres, trust authentication on 127.0.0.1.
func startPostgres(dir string) (*Private[*scratch.Server], error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	initdb, err := serverproc.Lookup([]string{"initdb"}, bins...)
	if err != nil {
		return nil, err
	}
	postgres := filepath.Join(filepath.Dir(initdb), "postgres")
	runAs, err := postgresUser(dir)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initialise := serverproc.Server{RunAs: runAs, Command: func() *exec.Cmd {
		return exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	}}
	if out, err := initialise.Run(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, serverproc.Tail(out))
	}
	return onFreePort(func(port string) (*Private[*scratch.Server], error) {
		srv, err := scratch.FromDSNUnchecked("postgres://postgres@127.0.0.1:"+port+"/postgres?sslmode=disable", "private")
		if err != nil {
			return nil, err
		}
		p := &Private[*scratch.Server]{Scratch: srv, Server: &serverproc.Server{RunAs: runAs, Log: filepath.Join(data, "log", "server.log"), Ready: srv.Ping,
			Command: func() *exec.Cmd {
				return exec.Command(postgres, "-D", data, "-p", port, "-k", dir, "-c", "listen_addresses=127.0.0.1",
					"-c", "logging_collector=on", "-c", "log_directory=log", "-c", "log_filename=server.log")
			}}}
		return p, nil
	})
}

// postgresUser returns whom to run PostgreSQL as: nil for this user, or,
// for root, the user postgres, who is given dir.
func postgresUser(dir string) (*serverproc.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL does not run as root, and there is no user postgres to run it as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &serverproc.User{Uid: uint32(uid), Gid: uint32(gid)}, os.Chown(dir, uid, gid)
}
