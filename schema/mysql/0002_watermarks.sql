-- The restored-backup guard. Each server keeps the highest counter ticketd has seen on each of its peers,
-- per namespace (peer_offset identifies the peer's ID space). A server restored from an old backup comes
-- back with a counter below what its peer recorded: ticketd fences it instead of reissuing every ID since
-- the backup, until `ticketd repair` advances it.
CREATE TABLE IF NOT EXISTS ticketd_watermarks (
  namespace   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  peer_offset BIGINT NOT NULL,
  high_water  BIGINT NOT NULL,
  updated_us  BIGINT NOT NULL,
  PRIMARY KEY (namespace, peer_offset)
) ENGINE=InnoDB;
