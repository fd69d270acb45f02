-- One row per namespace on every ticket server. next_id is the next ID this server issues; it is
-- always ≡ id_offset (mod step), where step and id_offset are the server's own
-- @@auto_increment_increment and @@auto_increment_offset, recorded when the row was created and checked
-- at every start. A lease of n IDs is one statement:
--   UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(next_id + n*step) WHERE name = ?
CREATE TABLE IF NOT EXISTS ticketd_namespaces (
  name           VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  next_id        BIGINT NOT NULL,
  step           BIGINT NOT NULL,
  id_offset      BIGINT NOT NULL,
  start_id       BIGINT NOT NULL,
  block_size     BIGINT NOT NULL,
  max_block_size BIGINT NOT NULL,
  lease_ttl_ms   BIGINT NOT NULL DEFAULT 0,
  created_us     BIGINT NOT NULL,
  updated_us     BIGINT NOT NULL,
  PRIMARY KEY (name),
  CONSTRAINT ticketd_next_positive CHECK (next_id >= 1),
  CONSTRAINT ticketd_step_positive CHECK (step >= 1)
) ENGINE=InnoDB;

-- Earlier, this file also created Flickr's per-ID table, Tickets64, as the benchmark's baseline; the
-- benchmark now makes it itself. A server that ran the earlier file keeps the table: no migration drops
-- it, since it may be an operator's own (`ticketd namespace adopt --flickr-table` reads one).
