-- The pace of leases next to the water marks. Each server keeps, per namespace and peer, the highest
-- rate (counter units per second) at which one ticketd process leased from that peer, as the process
-- measured it between two mark writes. `ticketd repair` sizes its default margin from it: the IDs that
-- can have been leased after the last mark was written.
CREATE TABLE IF NOT EXISTS ticketd_lease_rates (
  namespace   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  peer_offset BIGINT NOT NULL,
  peak_per_s  BIGINT NOT NULL,
  updated_us  BIGINT NOT NULL,
  PRIMARY KEY (namespace, peer_offset)
) ENGINE=InnoDB;
