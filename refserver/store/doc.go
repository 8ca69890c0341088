// Package store is the reference server's database: its gorm models and
// migrations, opening a DATABASE_URL (PostgreSQL or the embedded SQLite),
// creating, migrating and dropping the database, the queries the server
// makes for each request, the operator's queries (`idcli server agents`,
// `keys`, `tokens`), invitation tokens, the admin API's operator tokens,
// and the change log through which every server instance learns of a
// change within 1 s.
//
//	db, err := store.Open(ctx, databaseURL) // errors are *DBError
//	defer db.Close()
//	err = db.Migrate(ctx, os.Stdout)
//	agents, err := db.ListAgents(ctx, "", 100, false)
//
// refserver serves HTTP on a *DB (refserver.Config.DB); only this package,
// refserver/replaypg and refserver/dbtest import gorm or a database driver.
package store
