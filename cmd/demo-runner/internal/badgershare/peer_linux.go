package badgershare

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// sameUser accepts connections only from processes of this process's user
// (or root): the socket is private already (mode 0600); this holds even if
// its mode is changed.
type sameUser struct{ net.Listener }

func (l sameUser) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if peerIsSameUser(c) {
			return c, nil
		}
		c.Close()
	}
}

func peerIsSameUser(c net.Conn) bool {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || credErr != nil {
		return false
	}
	return cred.Uid == uint32(os.Getuid()) || cred.Uid == 0
}
