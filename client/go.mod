module github.com/ticketd/ticketd/client

go 1.25.0

require (
	github.com/ticketd/ticketd/internal/backoff v0.0.0-00010101000000-000000000000
	github.com/ticketd/ticketd/internal/hedge v0.0.0-00010101000000-000000000000
)

require go.uber.org/goleak v1.3.0

replace (
	github.com/ticketd/ticketd/internal/backoff => ../internal/backoff
	github.com/ticketd/ticketd/internal/hedge => ../internal/hedge
)
