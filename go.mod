module github.com/ticketd/ticketd

go 1.26

require (
	github.com/go-sql-driver/mysql v1.10.1
	go.etcd.io/bbolt v1.5.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
)
