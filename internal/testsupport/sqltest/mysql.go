package sqltest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/internal/testsupport/serverproc"
)

// MySQLEnvDSN names the variable that points tests at a MySQL server.
const MySQLEnvDSN = "RUNSTATE_MYSQL_DSN"

// MySQL is the MySQL (MariaDB) test environment: scratch databases on a
// server at RUNSTATE_MYSQL_DSN, e.g. root:secret@tcp(db.local:3306)/ (a
// database name in it is ignored), else on 127.0.0.1:3306, else MySQL 8
// in Docker; private servers are MariaDB's (or MySQL's) own binaries.
var MySQL = Engine[*scratch.Server]{
	Name:     "MySQL",
	EnvDSN:   MySQLEnvDSN,
	LocalDSN: "root@tcp(127.0.0.1:3306)/",
	Hint:     "start MariaDB/MySQL on 127.0.0.1:3306",
	FromDSN:  scratch.FromDSN,
	Docker: Container{Repository: "mysql", Tag: "8.4", Env: []string{"MYSQL_ROOT_PASSWORD=runstate"}, Port: "3306/tcp",
		DSN: "root:runstate@tcp(%s)/"},
	Package:      "mariadb-server",
	startPrivate: startMySQL,
	shared:       &shared[*scratch.Server]{},
}

var mysqlSbin = []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"}

// startMySQL initialises a data directory in dir and starts mariadbd (or
// mysqld) on it, root without a password.
func startMySQL(dir string) (*Private[*scratch.Server], error) {
	daemon, err := serverproc.Lookup([]string{"mariadbd", "mysqld"}, mysqlSbin...)
	if err != nil {
		return nil, err
	}
	user := os.Getenv("USER")
	if user == "" {
		user = "root"
	}
	data := filepath.Join(dir, "data")
	initialise := exec.Command(daemon, "--no-defaults", "--initialize-insecure", "--datadir="+data, "--user="+user)
	if filepath.Base(daemon) == "mariadbd" {
		install, err := serverproc.Lookup([]string{"mariadb-install-db", "mysql_install_db"}, mysqlSbin...)
		if err != nil {
			return nil, err
		}
		initialise = exec.Command(install, "--no-defaults", "--datadir="+data, "--user="+user, "--skip-test-db",
			"--auth-root-authentication-method=normal")
	}
	if out, err := initialise.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %v: %s", initialise, err, serverproc.Tail(out))
	}
	return onFreePort(func(port string) (*Private[*scratch.Server], error) {
		srv, err := scratch.FromDSNUnchecked("root@tcp(127.0.0.1:"+port+")/", "private")
		if err != nil {
			return nil, err
		}
		log := filepath.Join(dir, "server.log")
		p := &Private[*scratch.Server]{Scratch: srv, Server: &serverproc.Server{Log: log, Ready: srv.Ping, Command: func() *exec.Cmd {
			return exec.Command(daemon, "--no-defaults", "--datadir="+data, "--socket="+filepath.Join(dir, "sock"), "--port="+port,
				"--bind-address=127.0.0.1", "--user="+user, "--skip-grant-tables", "--skip-name-resolve",
				"--pid-file="+filepath.Join(dir, "server.pid"), "--log-error="+log, "--innodb-buffer-pool-size=32M")
		}}}
		return p, nil
	})
}
