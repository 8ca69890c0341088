// Package refserver is the agentid reference server, as an HTTP service:
// it registers agents and their Ed25519 public keys, rotates keys,
// publishes each agent's key directory on <uid>.<service host> and answers
// /whoami, all behind the agentid verification middleware. Its data lives
// in a database reached through refserver/store (PostgreSQL, or the
// embedded SQLite for laptops and demos); refserver/replaypg is the
// replay store several instances share.
//
// Run a whole server (database, migrations, listener, metrics) as
// `idcli server start` does:
//
//	in, err := refserver.Open(ctx, refserver.Options{DatabaseURL: url, Hostname: "https://agentid.example"})
//	err = in.Serve(ctx) // until ctx is done
//
// Or mount its handler on a database of your own:
//
//	db, err := store.Open(ctx, "postgres://localhost/service_production")
//	err = db.Migrate(ctx, os.Stdout)
//	srv, err := refserver.New(refserver.Config{DB: db, Hostname: "https://agentid.example"})
//	defer srv.Close()
//	http.ListenAndServe(":3000", srv.Handler())
//
// Operating a running service (agents, keys, invitation tokens, the
// database itself) goes through refserver/store, as `idcli server` does.
package refserver
