// Package refserver is the agentid reference server: it registers agents and
// their Ed25519 public keys, rotates keys, publishes each agent's key
// directory on <uid>.<service host> and answers /whoami, all behind the
// agentid verification middleware. Data lives in PostgreSQL (or the embedded
// SQLite for laptops and demos) through gorm, with gormigrate migrations.
//
//	db, err := refserver.OpenDB("postgres://localhost/service_production")
//	if err := refserver.Migrate(ctx, db, os.Stdout); err != nil { … }
//	srv, err := refserver.New(refserver.Config{DB: db, Hostname: "https://agentid.example"})
//	http.ListenAndServe(":3000", srv.Handler())
package refserver
