// Package testsupport holds, in its subpackages, what runstate's own tests
// and benchmarks share and nothing of the product uses: benchmark helpers
// (benchutil), private database servers (serverproc), the SQL engines'
// test servers and a PostgreSQL primary with a standby (sqltest), etcd
// clusters of a test's own (etcdcluster), test processes (proctest),
// loggers (testlog) and certificates (testtls).
package testsupport
