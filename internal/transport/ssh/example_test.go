package ssh_test

import (
	"context"
	"fmt"
	"log"

	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// A run keeps one Pool: every step's commands reuse the connection its
// first step made, and a host key seen for the first time is pinned.
func ExamplePool() {
	ctx := context.Background()
	var privateKey []byte // resolved from the soul's key_ref, kept in memory

	pool := ssh.NewPool(ssh.Options{
		OnNewHostKey: func(ctx context.Context, t ssh.Target, hostKey string) error {
			// Store hostKey in the soul's connection record.
			return nil
		},
	})
	defer pool.Close()

	c, err := pool.Get(ctx, ssh.Target{Address: "web1.local.test", User: "admin", PrivateKey: privateKey})
	if err != nil {
		log.Printf("%s: %v", ssh.Code(err), err) // e.g. ssh.unreachable
		return
	}
	res, err := c.Exec(ctx, ssh.Command{
		Argv: []string{"apt-get", "install", "-y", "git"},
		Env:  map[string]string{"DEBIAN_FRONTEND": "noninteractive"},
		Sudo: true,
	})
	if err != nil {
		log.Printf("%s: %v", ssh.Code(err), err)
		return
	}
	fmt.Println(res.ExitCode)
}
