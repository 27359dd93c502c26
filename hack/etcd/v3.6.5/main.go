// Command etcd is the etcd server at the version pinned in go.mod, for the test bed only.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
