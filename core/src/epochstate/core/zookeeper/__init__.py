"""ZooKeeper as every part of epochstate uses it: where things live, what znodes hold, session rules."""
