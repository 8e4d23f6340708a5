package postgres

import (
	"context"
	"time"
)

// Heartbeat implements store.Heartbeats: the instance's row says it is alive
// until now()+ttl by the database's clock; rein_instances lists the rows
// not yet expired.
func (s *Store) Heartbeat(ctx context.Context, instance string, ttl time.Duration) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	_, err := s.pool.Exec(octx, `INSERT INTO instances (id, started_at, heartbeat_at, expires_at)
		VALUES ($1, now(), now(), now() + $2::bigint * interval '1 microsecond')
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), expires_at = excluded.expires_at`,
		instance, ttl.Microseconds())
	if err != nil {
		return s.fail(ctx, octx, "heartbeat", err)
	}
	// Rows of instances long gone are of no use to anyone.
	_, _ = s.pool.Exec(octx, `DELETE FROM instances WHERE expires_at < now() - interval '1 day'`)
	return nil
}

// Leave implements store.Heartbeats.
func (s *Store) Leave(ctx context.Context, instance string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	if _, err := s.pool.Exec(octx, `DELETE FROM instances WHERE id = $1`, instance); err != nil {
		return s.fail(ctx, octx, "leave", err)
	}
	return nil
}
