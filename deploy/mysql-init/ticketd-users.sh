# The users of ticketd on a ticket server, created at the server's first start (the official mysql
# and mariadb images run this from /docker-entrypoint-initdb.d, with the root password and these
# variables in the environment):
#   ticketd          serves: SELECT, INSERT, UPDATE on ticketd's tables and nothing else (no DDL, no
#                    DELETE), enough for leases, namespace create and update, the water marks, doctor.
#   ticketd_migrate  runs `ticketd migrate` (and `namespace create`): the schema's DDL too.
# The grants are on the database (ticketd.*), which covers its tables before `ticketd migrate` creates
# them; the README's Configuration section gives the same grants table by table.
# Passwords come from TICKETD_DB_PASSWORD and TICKETD_MIGRATE_PASSWORD, never from a command line.

ticketd_sql_quote() { # a value as a SQL string literal: backslashes and quotes escaped
	local v=${1//\\/\\\\}
	printf "'%s'" "${v//\'/\'\'}"
}

MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysql --protocol=socket ${SOCKET:+--socket="$SOCKET"} -uroot <<SQL
CREATE USER IF NOT EXISTS 'ticketd'@'%' IDENTIFIED BY $(ticketd_sql_quote "$TICKETD_DB_PASSWORD");
GRANT SELECT, INSERT, UPDATE ON ticketd.* TO 'ticketd'@'%';
CREATE USER IF NOT EXISTS 'ticketd_migrate'@'%' IDENTIFIED BY $(ticketd_sql_quote "$TICKETD_MIGRATE_PASSWORD");
GRANT CREATE, ALTER, INDEX, SELECT, INSERT, UPDATE ON ticketd.* TO 'ticketd_migrate'@'%';
SQL
