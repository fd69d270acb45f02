-- A namespace's rows are keyed by the namespace and the offset of the server that leases from them.
-- Each server writes only its own row; servers that replicate each other (Galera, primary–primary)
-- then hold each other's rows as copies, which replication never merges into one. Dropping and adding
-- the key in one statement makes the migration safe to run again.
ALTER TABLE ticketd_namespaces DROP PRIMARY KEY, ADD PRIMARY KEY (name, id_offset);
