package sqldialect

// MySQLNumber is mysqlNumber.
var MySQLNumber = mysqlNumber
