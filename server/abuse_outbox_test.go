package server_test

import (
	"context"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// The broken store's outbox: the memory store's, failing like every other
// call once broken, so /api/webhooks answers as the routes that read
// sessions do.

func (b *brokenStore) ob() store.Outbox { return b.Store.(store.Outbox) }

func (b *brokenStore) RegisterDestination(ctx context.Context, dest string) (time.Time, error) {
	if err := b.fail(); err != nil {
		return time.Time{}, err
	}
	return b.ob().RegisterDestination(ctx, dest)
}
func (b *brokenStore) OutboxLag(ctx context.Context, dest string, limit int) ([]store.OutboxLag, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.ob().OutboxLag(ctx, dest, limit)
}
func (b *brokenStore) EnqueueDeliveries(ctx context.Context, key rein.SessionKey, dest string, from, to int64, ds []*store.Delivery) error {
	if err := b.fail(); err != nil {
		return err
	}
	return b.ob().EnqueueDeliveries(ctx, key, dest, from, to, ds)
}
func (b *brokenStore) ClaimDeliveries(ctx context.Context, dest, holder string, ttl time.Duration, limit int) ([]*store.Delivery, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.ob().ClaimDeliveries(ctx, dest, holder, ttl, limit)
}
func (b *brokenStore) RecordAttempt(ctx context.Context, id string, claim int64, a store.Attempt) (*store.Delivery, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.ob().RecordAttempt(ctx, id, claim, a)
}
func (b *brokenStore) GetDelivery(ctx context.Context, owner, id string) (*store.Delivery, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.ob().GetDelivery(ctx, owner, id)
}
func (b *brokenStore) ListDeliveries(ctx context.Context, owner string, q store.DeliveryQuery) ([]*store.Delivery, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.ob().ListDeliveries(ctx, owner, q)
}
func (b *brokenStore) RetryDelivery(ctx context.Context, owner, id string) (*store.Delivery, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.ob().RetryDelivery(ctx, owner, id)
}
