module github.com/ticketd/ticketd/internal/hedge

go 1.25.0
