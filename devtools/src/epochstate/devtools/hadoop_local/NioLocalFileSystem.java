package epochstate.devtools.hadoop_local;

import org.apache.hadoop.fs.LocalFileSystem;

/** Hadoop's checksummed local file system (the {@code file:} scheme's FileSystem) over {@link NioRawLocalFileSystem}. */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
