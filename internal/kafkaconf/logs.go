package kafkaconf

import "log/slog"

// SlogLevel is the slog level of a librdkafka log line's syslog level
// (0 emergency .. 7 debug): kord's clients log librdkafka's lines at it.
func SlogLevel(syslog int) slog.Level {
	switch {
	case syslog <= 3:
		return slog.LevelError
	case syslog == 4:
		return slog.LevelWarn
	case syslog <= 6:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}
