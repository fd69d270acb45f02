module github.com/ticketd/ticketd/internal/backoff

go 1.25.0
