// The shared store of a cluster of nodes: PostgreSQL through postgres-nio.
//
// Schema version 1 (the tables of the SQLite store, in PostgreSQL's words):
//
//     room          (room_id TEXT PRIMARY KEY, alias TEXT UNIQUE, name, description, type, bridge_id, pin,
//                    created_at BIGINT)
//     member        (room_id → room ON DELETE CASCADE, session_id, screen_name, role, state,
//                    streams TEXT /* JSON [RoomStreamDescription] */, last_update BIGINT, join_order BIGINT,
//                    PRIMARY KEY (room_id, session_id))
//     session       (session_id TEXT PRIMARY KEY, resume_key_hash TEXT, roles TEXT /* JSON, NULL = any */)
//     chat_message  (sequence BIGINT PRIMARY KEY, room_id → room ON DELETE CASCADE, timestamp BIGINT,
//                    from_session_id, from_screen_name, from_role, from_last_update BIGINT,
//                    message BYTEA /* UTF-8, byte for byte: PostgreSQL's TEXT cannot hold a NUL */),
//                    INDEX (room_id, sequence)
//     store_counter (name TEXT PRIMARY KEY, value BIGINT): 'lastChatSequence'
//     pcast_schema  (version INTEGER): the schema version; a node refuses a database newer than it knows.
//
// Version 2 adds node membership:
//
//     node          (node_id TEXT PRIMARY KEY, signaling_url, relay_address, streams INTEGER, sessions INTEGER,
//                    started_at BIGINT, heartbeat_at TIMESTAMPTZ /* the database's clock */)
//
// Version 3, the cluster's change log (what one node changed, for the others to follow):
//
//     change_log    (id BIGSERIAL PRIMARY KEY, node_id TEXT, changes TEXT /* JSON [RoomStoreChange] */, created_at TIMESTAMPTZ)
//     node.slot     INTEGER: the node's chat sequence slot, unique among live nodes
//
// Version 4, the stream directory (which node's relay has each stream):
//
//     stream        (stream_id TEXT PRIMARY KEY, node_id TEXT, published_at BIGINT, entry TEXT /* JSON SharedStream */),
//                   INDEX (node_id)
//
// Version 5, how far the change log was pruned (a node that has not read that far missed changes):
//
//     change_log_horizon (pruned_through BIGINT): the highest id pruned
//
// Version 6, the audit log (admin actions and refused admin requests, every node's):
//
//     audit         (sequence BIGSERIAL PRIMARY KEY, time BIGINT, node_id, actor, remote_address, action,
//                    outcome, detail TEXT)
//
// A node that publishes its changes writes them to change_log in the same transaction as the
// tables, under an advisory lock (so ids commit in id order), and NOTIFYs `pcast_changes`; the
// others LISTEN and read past the last id they applied (after a reconnect too: nothing is missed).
//
// Migrations run at start inside one transaction holding an advisory lock, so nodes starting
// together migrate once.

extension PostgresPlatformStore {
    /// The schema versions this build knows, in order: migration `n` brings the schema to version `n + 1`.
    static let migrations: [String] = [
        """
        CREATE TABLE room (
            room_id TEXT NOT NULL PRIMARY KEY,
            alias TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            description TEXT NOT NULL,
            type TEXT NOT NULL,
            bridge_id TEXT NOT NULL,
            pin TEXT NOT NULL,
            created_at BIGINT NOT NULL
        );
        CREATE TABLE member (
            room_id TEXT NOT NULL REFERENCES room(room_id) ON DELETE CASCADE,
            session_id TEXT NOT NULL,
            screen_name TEXT NOT NULL,
            role TEXT NOT NULL,
            state TEXT NOT NULL,
            streams TEXT NOT NULL,
            last_update BIGINT NOT NULL,
            join_order BIGINT NOT NULL,
            PRIMARY KEY (room_id, session_id)
        );
        CREATE TABLE session (
            session_id TEXT NOT NULL PRIMARY KEY,
            resume_key_hash TEXT NOT NULL,
            roles TEXT
        );
        CREATE TABLE chat_message (
            sequence BIGINT PRIMARY KEY,
            room_id TEXT NOT NULL REFERENCES room(room_id) ON DELETE CASCADE,
            timestamp BIGINT NOT NULL,
            from_session_id TEXT NOT NULL,
            from_screen_name TEXT NOT NULL,
            from_role TEXT NOT NULL,
            from_last_update BIGINT NOT NULL,
            message BYTEA NOT NULL
        );
        CREATE INDEX chat_message_room_sequence ON chat_message(room_id, sequence);
        CREATE TABLE store_counter (
            name TEXT NOT NULL PRIMARY KEY,
            value BIGINT NOT NULL
        );
        INSERT INTO store_counter (name, value) VALUES ('lastChatSequence', 0);
        """,
        """
        CREATE TABLE node (
            node_id TEXT NOT NULL PRIMARY KEY,
            signaling_url TEXT NOT NULL,
            relay_address TEXT NOT NULL,
            streams INTEGER NOT NULL,
            sessions INTEGER NOT NULL,
            started_at BIGINT NOT NULL,
            heartbeat_at TIMESTAMPTZ NOT NULL
        );
        """,
        """
        CREATE TABLE change_log (
            id BIGSERIAL PRIMARY KEY,
            node_id TEXT NOT NULL,
            changes TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        ALTER TABLE node ADD COLUMN slot INTEGER NOT NULL DEFAULT 0;
        """,
        """
        CREATE TABLE stream (
            stream_id TEXT NOT NULL PRIMARY KEY,
            node_id TEXT NOT NULL,
            published_at BIGINT NOT NULL,
            entry TEXT NOT NULL
        );
        CREATE INDEX stream_node ON stream(node_id);
        """,
        """
        CREATE TABLE change_log_horizon (
            pruned_through BIGINT NOT NULL
        );
        INSERT INTO change_log_horizon (pruned_through) VALUES (0);
        """,
        """
        CREATE TABLE audit (
            sequence BIGSERIAL PRIMARY KEY,
            time BIGINT NOT NULL,
            node_id TEXT NOT NULL,
            actor TEXT NOT NULL,
            remote_address TEXT NOT NULL,
            action TEXT NOT NULL,
            outcome TEXT NOT NULL,
            detail TEXT NOT NULL
        );
        """,
    ]
}
