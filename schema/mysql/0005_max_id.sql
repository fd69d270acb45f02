-- A namespace's ceiling, inclusive: the lease statement takes no ID above it. Rows made before it have
-- the largest BIGINT, the ceiling they always had.
ALTER TABLE ticketd_namespaces ADD COLUMN max_id BIGINT NOT NULL DEFAULT 9223372036854775807;
