-- What the guard needs to see a fleet, not one process.
--
-- Each water mark records which server its counter was seen on (@@server_id): a server that answers
-- with another identity at that offset is another server in its place (a replica promoted after a
-- failover, a virtual IP moved), and is fenced like a restored one. Empty when unknown.
ALTER TABLE ticketd_watermarks ADD COLUMN server_identity VARCHAR(64) NOT NULL DEFAULT '';
-- Each process adds what it leased from a peer since its last write (counter units) to leased; the
-- server keeps the rate of the sum over windows of at least one water-mark interval of its own clock
-- (window_leased and window_us hold where the current window began), and the highest such rate in
-- fleet_peak_per_s: how fast every process together leased, for sizing a repair's margin.
ALTER TABLE ticketd_lease_rates ADD COLUMN leased BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ticketd_lease_rates ADD COLUMN window_leased BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ticketd_lease_rates ADD COLUMN window_us BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ticketd_lease_rates ADD COLUMN fleet_peak_per_s BIGINT NOT NULL DEFAULT 0;
-- The longest water-mark interval of the processes that wrote here: what a mark can lag behind.
ALTER TABLE ticketd_lease_rates ADD COLUMN interval_us BIGINT NOT NULL DEFAULT 0;
-- Processes of this schema write written_us and leave updated_us alone: a recent updated_us is a
-- process of an older release leasing, one that ignores ceilings, and a ceiling is not lowered then.
ALTER TABLE ticketd_lease_rates ADD COLUMN written_us BIGINT NOT NULL DEFAULT 0;
-- When max_id was last set. A row written by a ticketd that predates it holds 0, unknown: its ceiling
-- never overrides one set at a known time.
ALTER TABLE ticketd_namespaces ADD COLUMN max_id_us BIGINT NOT NULL DEFAULT 0;
